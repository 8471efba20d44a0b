"""Small durable-file-system helpers shared by the object store and the directory remote."""

from __future__ import annotations

import contextlib
import os
import uuid
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


def write_atomically(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Make *data* the whole content of *path* at once, through a temporary file beside it.

    Readers see the old content or the new, never a part. The temporary file is
    named ``<name>.<pid>.<random>.tmp`` (so that sweeps of one file's leftovers can
    find them); with *fsync* the bytes reach the disk before the rename.

    Raises:
        OSError: it cannot be written (*path* is left as it was; the temporary file is removed).
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
