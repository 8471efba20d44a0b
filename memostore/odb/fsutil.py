"""Small durable-file-system helpers shared by the object store and the directory remote."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_all(fd: int, data: memoryview) -> None:
    """Write every byte of *data* to *fd* (os.write may write less than asked)."""
    while data:
        written = os.write(fd, data)
        data = data[written:]


def fsync_dir(path: Path | str) -> None:
    """Make renames into *path* durable; a no-op where the file system refuses it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
