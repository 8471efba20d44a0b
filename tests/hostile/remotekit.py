"""Hostile remotes for the lab: a directory beside the victim's project, or an S3 bucket.

``remote_url`` is a parametrised fixture: each test that takes it runs once
against a directory remote and once against a bucket on ``moto_server``
(``tests/conftest_s3.py``). ``peak_rss_mb`` runs the real CLI in a fresh
interpreter and reports the most memory it held.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .labkit import Lab

# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child
# of a large test process would report its parent's size.
_RSS_RUNNER = """
import sys
from memostore_cli.main import cli
try:
    cli.main(args=sys.argv[1:], prog_name="memostore")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open("/proc/self/status") as f:
    peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
print("PEAK_RSS_KB", peak, file=sys.stderr)
sys.exit(code if isinstance(code, int) else 1)
"""


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.s3)])
def remote_url(request: pytest.FixtureRequest, lab: Lab) -> str:
    """The URL of an empty remote the attacker writes: a directory, or an S3 bucket."""
    if request.param == "s3":
        return str(request.getfixturevalue("s3_bucket"))
    return str(lab.remote)


def cli_with_peak(lab: Lab, store: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``memostore --store STORE ARGS`` in a fresh interpreter: (process, peak RSS in MB)."""
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_RUNNER, "--store", str(store), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "BROWSER": str(lab.browser)},
        cwd=str(lab.project),
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KB")]
    assert lines, proc.stderr
    return proc, int(lines[-1].split()[1]) // 1024


def sparse(path: Path, size: int) -> None:
    """A file of *size* bytes that takes no disk space (a hole), written by the attacker."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
