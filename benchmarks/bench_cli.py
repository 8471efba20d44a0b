"""Timings of ``memostore log`` and ``show`` on a generated store with many evaluations.

Builds a store of N evaluations (default 10,000) over five functions, written
the way ``@memo`` writes them (arguments, code and result documents, an
evaluation record and its ref), some with a large tensor-like blob in their
result, then runs the real ``memostore`` console script as a subprocess with
output piped and reports the median wall time of each command:

- ``log`` before the evaluation index exists (it is built on that run),
- ``log``, ``log --json``, ``log FUNCTION -n 20`` with the index,
- ``show <prefix>`` and ``show <function>`` (``show`` must not read blob data:
  the evaluation shown has a 256 MiB blob in its result).

Targets: ``log`` under 1 s, ``show`` under 300 ms. Run from the repository root::

    python benchmarks/bench_cli.py
    python benchmarks/bench_cli.py --count 2000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import result

from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.odb.store import Store
from memostore.records.evaluation import code_doc, eval_ref_name, evaluation_doc

FUNCTIONS = [f"project.train{i}:fit" for i in range(5)]
BIG_BLOB = 256 << 20


class _Dep:
    def __init__(self, symbol: str, digest: str, source: str) -> None:
        self.symbol, self.kind, self.digest, self.source = symbol, "function", digest, source


class _Code:
    def __init__(self, symbol: str) -> None:
        source = f"def fit(data, lr):\n    return helper(data) * lr  # {symbol}\n"
        self.symbol = symbol
        self.digest = os.urandom(32).hex()
        self.deps = {
            symbol: _Dep(symbol, os.urandom(32).hex(), source),
            "project.util:helper": _Dep(
                "project.util:helper", os.urandom(32).hex(), "def helper(x):\n    return x\n"
            ),
        }


def build_store(root: Path, count: int, big_every: int) -> list[str]:
    """Write *count* evaluations; return their ids (oldest first)."""
    store = Store(root)
    codes = {f: code_doc(_Code(f)) for f in FUNCTIONS}
    for doc in codes.values():
        store.objects.add_doc(doc)
    big = store.objects.add_bytes(b"\0" * BIG_BLOB) if big_every else None
    ids: list[str] = []
    now = time.time() - count
    for i in range(count):
        function = FUNCTIONS[i % len(FUNCTIONS)]
        lr = 10.0 ** -(1 + i % 4)
        args = Doc(KIND_VALUE, {"node": {"$": "args", "items": [["n", i], ["lr", lr]]}})
        blob = (
            big
            if big_every and i % big_every == 0
            else store.objects.add_bytes(i.to_bytes(8, "little") * 16)
        )
        tensor = {"$": "ndarray", "descr": "<f4", "shape": [32], "blob": blob}
        links = Links(blobs={blob})
        result = Doc(KIND_VALUE, {"node": {"$": "tuple", "items": [tensor, lr]}}, links)
        store.objects.add_doc(args)
        store.objects.add_doc(result)
        key = os.urandom(32).hex()
        fields = {
            "function": function,
            "key": key,
            "code": codes[function].id,
            "code_digest": codes[function].body["digest"],
            "version": None,
            "args": args.id,
            "hparams": {"n": i, "lr": lr},
            "args_summary": {"n": str(i), "lr": repr(lr)},
            "result": result.id,
            "result_summary": "tuple(len=2)",
            "status": "ok",
            "error": None,
            "started": now + i,
            "duration_s": 1.0 + i % 7,
            "provenance": {"host": "bench", "python": "3.11", "packages": {}, "git": {}},
            "parents": [ids[-1]] if ids and i % 3 else [],
            "payloads": {},
            "logs": None,
        }
        doc = evaluation_doc(fields, Links())
        store.objects.add_doc(doc)
        store.refs.set(eval_ref_name(function, key), doc.id)
        ids.append(doc.id)
    return ids


def existing_ids(root: Path) -> list[str]:
    """Evaluation ids of a store built earlier, oldest first."""
    store = Store(root)
    started = {
        evaluation_id: store.evaluation(evaluation_id).body["started"]
        for _, evaluation_id in store.iter_evaluation_refs()
    }
    return sorted(started, key=started.__getitem__)


def timed(argv: list[str], runs: int, before: object = None) -> tuple[float, float]:
    """Median (wall, CPU) seconds of the ``memostore`` console script run with *argv*.

    CPU time (user + system of the child) is reported beside wall time because
    on a busy machine wall time mostly measures the other processes.
    """
    exe = shutil.which("memostore") or sys.executable
    prefix = [exe] if exe.endswith("memostore") else [exe, "-m", "memostore_cli.main"]
    walls, cpus = [], []
    for _ in range(runs):
        if callable(before):
            before()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(prefix + argv, capture_output=True, check=False)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.decode()}")
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--big-every", type=int, default=1000, help="a big blob every N results (0: none)"
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="build the store here and keep it (reused when present)",
    )
    args = parser.parse_args()
    tmp = None
    root = args.store
    if root is None:
        tmp = tempfile.mkdtemp(prefix="memostore-bench-cli-")
        root = Path(tmp) / "store"
    try:
        if (root / "FORMAT").exists():
            ids = existing_ids(root)
            print(f"reusing the {len(ids)} evaluations at {root}")
        else:
            t0 = time.perf_counter()
            ids = build_store(root, args.count, args.big_every)
            print(f"built {args.count} evaluations in {time.perf_counter() - t0:.1f}s at {root}")
        store = ["--store", str(root)]
        index_file = root / "index" / "evaluations"

        def drop_index() -> None:
            index_file.unlink(missing_ok=True)

        shown = ids[0] if args.big_every else ids[len(ids) // 2]
        count = len(ids)
        results = [
            ("cli.log_first", "log (no index yet: builds it)",
             timed([*store, "log"], args.runs, drop_index), 1.0),
            ("cli.log", "log", timed([*store, "log"], args.runs), 1.0),
            ("cli.log_json", "log --json", timed([*store, "log", "--json"], args.runs), 1.0),
            ("cli.log_function", "log fit -n 20",
             timed([*store, "log", FUNCTIONS[0], "-n", "20"], args.runs), 1.0),
            ("cli.show_prefix", "show <8-hex prefix> (256 MiB result blob)",
             timed([*store, "show", shown[:8]], args.runs), 0.3),
            ("cli.show_json", "show --json <prefix>",
             timed([*store, "show", "--json", shown[:8]], args.runs), 0.3),
            ("cli.show_function", "show <function>",
             timed([*store, "show", FUNCTIONS[1]], args.runs), 0.3),
        ]  # fmt: skip
        print(f"{'command':45s} {'wall':>8s}    {'cpu':>8s}")
        for _key, name, (seconds, cpu), target in results:
            verdict = "ok" if seconds < target else "SLOW"
            print(
                f"{name:45s} {seconds * 1000:5.0f} ms  {cpu * 1000:5.0f} ms"
                f"   (target {target * 1000:.0f} ms: {verdict})"
            )
        for key, name, (seconds, cpu), target in results:
            result(
                key,
                f"memostore {name}, {count:,} evaluations (a subprocess, output piped)",
                ours=seconds * 1000,
                unit="ms",
                kind="below",
                limit=target * 1000,
                note=f"median of {args.runs}; CPU {cpu * 1000:.0f} ms",
            )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
