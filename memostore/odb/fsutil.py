"""Small durable-file-system helpers shared by the object store and the directory remote."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
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
    """Linux's ``syncfs(2)`` through the C library, or None where there is none.

    Loaded on the first barrier, not at import: ctypes costs a CLI that never writes.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


def has_barrier() -> bool:
    """Whether :func:`barrier` can make a whole file system durable in one call.

    Where it can, writers skip the fsync of each new file and call it once.
    """
    return _syncfs() is not None


def barrier(path: Path | str) -> bool:
    """Make every write to *path*'s file system durable: data, metadata, renames.

    One ``syncfs`` waits for one journal commit and one cache flush, where an
    fsync per file and per directory waits for one each. It also flushes other
    processes' dirty pages on that file system, which would reach the disk
    anyway within seconds. Since Linux 5.8 it reports writeback errors of the
    file system; False when it failed or is unavailable (the caller then
    fsyncs file by file).
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
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
