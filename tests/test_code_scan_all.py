"""The dependency scanner reads every function of the standard library, torch and transformers.

``tests/code_scan_worker.py`` imports every importable module of the three
(modules that fail to import are skipped, and so are the CPython test suite
``test``, ``__main__`` modules and the few whose import opens a browser or
starts a program) and puts every function it finds through what
``code_info`` does for user code: module functions, methods, static and
class methods, property accessors, ``cached_property`` functions, the
functions behind ``functools.wraps`` wrappers and every code object nested
in them (closures, lambdas, comprehensions) go through ``scan_fast`` and
``scan_dis``; each function's definition is found in its source, normalised
and hashed, and checked against its code; its bytecode is hashed; every
class's ``class`` statement is found and hashed. Nothing is sampled.

One worker process reads them all: split between two, each still imported most
of torch (transformers imports it), and the pair cost twice the CPU of one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "code_scan_worker.py"
REPO = Path(__file__).resolve().parents[1]
SHARDS = 1
GROUPS = ["stdlib", "torch", "transformers"]


def _run_shard(shard: int) -> dict:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, str(WORKER), "--shard", f"{shard}/{SHARDS}", *GROUPS],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_scanner_reads_every_function_of_stdlib_torch_and_transformers() -> None:
    pytest.importorskip("transformers")
    with ThreadPoolExecutor(SHARDS) as pool:
        reports = list(pool.map(_run_shard, range(SHARDS)))
    failures = [failure for report in reports for failure in report["failures"]]
    assert failures == []
    # Not vacuous: the three libraries were imported and their functions scanned.
    assert sum(report["imported"] for report in reports) > 4000
    assert sum(report["functions"] for report in reports) > 80_000
    assert sum(report["classes"] for report in reports) > 15_000
