"""What the collective hit-or-miss decision costs inside a torch.distributed job.

The same memoised call with a tiny argument, stored once, then hit many
times in a row:

* in one process (torch imported, no process group): the plain hit;
* in each rank of a ``torchrun --standalone --nproc_per_node 2`` job on gloo
  (CPU): the hit plus the decision (rank 0 looks up, one all-gather of the
  keys and its answer, every rank plans its own hit, one all-gather of
  whether every rank can).

The decision's cost is the difference of the two medians (target <= 5 ms per
call). Both runs use one store in a temporary directory.

Run from the repository root: ``python benchmarks/bench_distributed.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import result

WORKER = textwrap.dedent(
    """\
    import os, statistics, sys, time
    import torch
    import torch.distributed as dist
    from memostore import memo

    job = "WORLD_SIZE" in os.environ
    if job:
        dist.init_process_group("gloo")


    @memo
    def tiny(x):
        return x + 1


    tiny(1)  # stored (a miss) the first time, a hit after
    times = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        tiny(1)
        times.append(time.perf_counter() - start)
    if not job or dist.get_rank() == 0:
        print(f"MEDIAN {statistics.median(times)}", flush=True)
    if job:
        dist.destroy_process_group()
    """
)


def _median(command: list[str], env: dict[str, str]) -> float:
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    found = re.search(r"^MEDIAN (\S+)$", proc.stdout, re.M)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{command[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="hits timed per run")
    options = parser.parse_args()
    torchrun = Path(sys.executable).with_name("torchrun")
    with tempfile.TemporaryDirectory() as tmp:
        worker = Path(tmp) / "worker.py"
        worker.write_text(WORKER)
        env = {**os.environ, "MEMOSTORE_DIR": str(Path(tmp) / "store"), "OMP_NUM_THREADS": "1"}
        calls = str(options.calls)
        single = _median([sys.executable, str(worker), calls], env)
        ranks = _median(
            [str(torchrun), "--standalone", "--nproc_per_node", "2", str(worker), calls], env
        )
    cost = ranks - single
    print(
        f"hit of a tiny call: one process {single * 1e3:.3f} ms, 2 gloo ranks "
        f"{ranks * 1e3:.3f} ms: the decision costs {cost * 1e3:.3f} ms per call (target <= 5 ms)",
        flush=True,
    )
    result(
        "distributed.decision",
        f"Collective hit-or-miss decision per call, 2 gloo ranks (hit, median of {options.calls})",
        ours=cost * 1e3,
        kind="below",
        limit=5.0,
        unit="ms",
        note=f"hit in one process {single * 1e3:.3f} ms; in each of 2 ranks {ranks * 1e3:.3f} ms",
    )
    result(
        "distributed.hit",
        "Hit of a tiny call in a 2-rank gloo job",
        ours=ranks * 1e3,
        kind="info",
        baseline=single * 1e3,
        baseline_name="the same hit in one process",
        unit="ms",
    )


if __name__ == "__main__":
    main()
