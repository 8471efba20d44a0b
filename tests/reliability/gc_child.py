"""A child that runs gc on a store in a loop until told to stop.

Usage: ``gc_child.py PROGRESS STORE GRACE_S STOP_FILE``. Most passes call
:func:`memostore.lifecycle.maintenance.gc` (many passes a second); every tenth runs the
``memostore gc`` command instead, when it is installed. Appends
``pass DELETED`` to PROGRESS after each pass; any error ends the child with a
non-zero status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from memostore import Store
from memostore.lifecycle import maintenance


def _cli_gc(store: str, grace_s: float) -> int | None:
    """Objects deleted by one ``memostore gc`` run; None where the command is missing."""
    command = ["memostore_cli.main", "--store", store, "gc", "--grace", str(grace_s), "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "No module named" in proc.stderr:
        return None
    if proc.returncode != 0:
        raise SystemExit(f"memostore gc failed ({proc.returncode}): {proc.stderr}")
    return len(json.loads(proc.stdout)["deleted"])


def main() -> None:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = Store(sys.argv[2])
    grace_s = float(sys.argv[3])
    stop = Path(sys.argv[4])
    os.write(fd, b"ready\n")
    passes = 0
    while not stop.exists():
        passes += 1
        deleted = _cli_gc(sys.argv[2], grace_s) if passes % 10 == 0 else None
        via = "cli"
        if deleted is None:
            deleted, via = len(maintenance.gc(store, grace_s=grace_s).deleted), "api"
        os.write(fd, f"pass {deleted} {via}\n".encode())
        time.sleep(0.01)


if __name__ == "__main__":
    main()
