"""A child that runs gc on a store in a loop until told to stop.

Usage: ``gc_child.py PROGRESS STORE GRACE_S STOP_FILE``. Appends
``pass DELETED KEPT_YOUNG`` to PROGRESS after each gc; any error ends the
child with a non-zero status.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from memostore import Store, maintenance


def main() -> None:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = Store(sys.argv[2])
    grace_s = float(sys.argv[3])
    stop = Path(sys.argv[4])
    os.write(fd, b"ready\n")
    while not stop.exists():
        report = maintenance.gc(store, grace_s=grace_s)
        os.write(fd, f"pass {len(report.deleted)} {report.kept_young}\n".encode())
        time.sleep(0.01)


if __name__ == "__main__":
    main()
