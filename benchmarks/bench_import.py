"""Start-up cost: ``import memostore`` against ``import joblib``, and a listing command.

Each figure is the median wall time of ``--runs`` fresh interpreters, run in
rotation (so that other load falls on all alike):

- ``python -c "import memostore"`` against ``python -c "import joblib"``
  (target: at most 1.0x);
- ``memostore log -n 5`` on a store of 5 evaluations against a bare
  ``python -c pass``.

Run from the repository root::

    python benchmarks/bench_import.py [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, result


def _median_walls(commands: dict[str, list[str]], runs: int, env: dict[str, str]) -> dict:
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, env=env, capture_output=True)
            walls[name].append(time.perf_counter() - t0)
    return {name: statistics.median(values) for name, values in walls.items()}


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MEMOSTORE_DIR": str(Path(tmp) / "store")}
        setup = "import memostore\n@memostore.memo\ndef f(x):\n    return x\n[*map(f, range(5))]"
        subprocess.run([sys.executable, "-c", setup], check=True, env=env, cwd=tmp)
        py = sys.executable
        times = _median_walls(
            {
                "memostore": [py, "-c", "import memostore"],
                "joblib": [py, "-c", "import joblib"],
                "pass": [py, "-c", "pass"],
                "log": [py, "-m", "memostore_cli.main", "log", "-n", "5"],
            },
            args.runs,
            env,
        )
    report("import memostore", times["memostore"], times["joblib"], "import joblib", "<= 1.0x")
    report("memostore log -n 5 (5 evaluations)", times["log"], times["pass"], "python -c pass", "")
    note = f"median of {args.runs} fresh interpreters, in rotation"
    return [
        result("import.memostore", "import memostore in a fresh interpreter",
               ours=times["memostore"], baseline=times["joblib"], baseline_name="import joblib",
               kind="max", limit=1.0, note=note),
        result("import.cli_log", "memostore log -n 5 on 5 evaluations, a fresh interpreter",
               ours=times["log"], baseline=times["pass"], baseline_name="python -c pass",
               kind="max", limit=4.0, note=note),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
