"""Small durable-file-system helpers shared by the object store and the directory remote."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import uuid
from collections.abc import Callable
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


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """Linux's ``syncfs(2)``, or None; loaded on first use (ctypes costs a CLI)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    fn = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


def has_barrier() -> bool:
    """Whether :func:`barrier` is available: writers then skip the fsync of each small file."""
    return _syncfs() is not None


def barrier(path: Path | str) -> bool:
    """Make every write to *path*'s file system durable (data, metadata, renames) at once.

    One ``syncfs`` waits for one journal commit and cache flush, where an fsync per
    file and directory waits for one each; it also flushes other processes' dirty
    pages there. It reports writeback errors (Linux >= 5.8): False when it failed
    or is unavailable, and the caller fsyncs file by file.
    """
    fn = _syncfs()
    if fn is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return fn(fd) == 0
    finally:
        os.close(fd)


def fsync_path(path: Path | str) -> None:
    """fsync the file at *path* (gone already: nothing to make durable)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
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
