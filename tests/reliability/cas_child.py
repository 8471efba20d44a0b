"""A child that bumps a counter ref by compare-and-swap until it is killed.

Usage: ``cas_child.py PROGRESS STORE_ROOT``. Each successful swap appends
``bumped N`` to PROGRESS (N: the value it wrote). Two children reporting the
same N would mean two holders of one lock at once.
"""

from __future__ import annotations

import os
import sys

from memostore.odb.refs import DiskRefContainer


def main() -> None:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    refs = DiskRefContainer(sys.argv[2])
    os.write(fd, b"ready\n")
    while True:
        current = refs.read("counter")
        value = int(current, 16) if current else 0
        if refs.set_if_equals("counter", current, f"{value + 1:064x}"):
            os.write(fd, f"bumped {value + 1}\n".encode())


if __name__ == "__main__":
    main()
