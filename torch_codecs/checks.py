"""Checking memory-mapped tensor blobs against their ids: in the background, or at once.

A large tensor is restored by mapping its blob, so a hit costs next to nothing
whatever the tensor's size. Its bytes are still checked against the blob id
once per process: by default on a background thread (``"background"``, queued
once the whole value is restored, so that hashing does not slow the restore), which
hashes the file itself (never the private mapping, so writes into the restored
tensor cannot be mistaken for damage). On a mismatch the blob is moved out of
the way (so the next call of the function recomputes and repairs it), the
restored tensors leave the digest cache, and a :class:`MemostoreWarning` says
so. ``set_check_mode("eager")`` checks before the restore returns instead: a
damaged blob then makes the call a miss at once, at the cost of hashing every
restored byte up front (about 0.2 s per GiB here).
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any

import blake3

from memostore.errors import CorruptObject, MemostoreWarning, ObjectNotFound
from memostore.hashcache import digest_cache

MODES = ("background", "eager")
_mode = "background"

# blob id -> (inode, size, mtime) of a file already checked in this process.
# Store files are written once and never modified, so a checked file stays good.
_verified: dict[str, tuple[int, int, int]] = {}
_lock = threading.Lock()
# Guards PendingCheck's tensors against a concurrent failure; one lock for all of
# them, since a restore makes one check per blob and contention is rare.
_guard = threading.Lock()
_jobs: queue.Queue[list[PendingCheck]] = queue.Queue()
_worker: threading.Thread | None = None
# Background checks leave one core to the caller, who is using what was restored.
_BACKGROUND_THREADS = max(1, (os.cpu_count() or 1) - 1)


def set_check_mode(mode: str) -> None:
    """Check mapped blobs ``"background"`` (the default) or ``"eager"``-ly."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"check mode must be one of {MODES}, not {mode!r}")
    _mode = mode


def check_mode() -> str:
    return _mode


class PendingCheck:
    """A blob whose check is queued, and the restored tensors that read from it."""

    __slots__ = ("_failed", "_tensors", "blob_id", "objects", "path", "span", "stamp")

    def __init__(
        self,
        objects: Any,
        blob_id: str,
        path: str | Path,
        stamp: tuple[int, int, int],
        span: tuple[int, int] | None = None,
    ) -> None:
        self.objects = objects
        self.blob_id = blob_id
        self.path = path
        self.stamp = stamp
        self.span = span  # (offset, length) of the blob in a pack file; None: the whole file
        self._tensors: list[weakref.ref[Any]] = []
        self._failed = False

    def attach(self, tensor: Any) -> None:
        """Note that *tensor* holds this blob's bytes (its digest is dropped on damage).

        Call after the tensor's digest entered the cache: a check that already
        failed drops it here, one still to fail drops it then.
        """
        with _guard:
            if not self._failed:
                self._tensors.append(weakref.ref(tensor))
                return
        digest_cache.forget(tensor)

    def run(self) -> None:
        actual = _hash_file(self.path, _BACKGROUND_THREADS, self.span)
        if actual is None:
            return  # removed since (by gc): nothing left to check
        if actual == self.blob_id:
            with _lock:
                _verified[self.blob_id] = self.stamp
            return
        self.objects.quarantine(self.blob_id)
        with _guard:
            self._failed = True
            refs, self._tensors = self._tensors, []
        for ref in refs:
            tensor = ref()
            if tensor is not None:
                digest_cache.forget(tensor)
        warnings.warn(
            f"memostore: {CorruptObject(self.blob_id, actual, str(self.path))}. Tensors "
            "restored from it hold wrong values; the next call of the function that "
            "stored them recomputes it",
            MemostoreWarning,
            stacklevel=1,
        )


def is_verified(blob_id: str, stamp: tuple[int, int, int]) -> bool:
    # A single dict read is atomic: no lock on this path, which runs per restored tensor.
    return _verified.get(blob_id) == stamp


def forget_verified() -> None:
    """Forget which blobs were checked (the next restore checks them again)."""
    with _lock:
        _verified.clear()


def check_mapped(
    objects: Any,
    blob_id: str,
    path: str | Path,
    stamp: tuple[int, int, int],
    batch: list[PendingCheck] | None = None,
    span: tuple[int, int] | None = None,
) -> PendingCheck | None:
    """Check a mapped blob now (eager mode: raises CorruptObject) or queue its check.

    With *batch*, a background check is appended to it rather than queued: the
    caller queues the batch with :func:`submit` once the whole value is restored,
    so that hashing does not compete with the restore itself for the CPU. *span*
    is the blob's (offset, length) when *path* is a pack file.
    """
    if _verified.get(blob_id) == stamp:
        return None
    job = PendingCheck(objects, blob_id, path, stamp, span)
    if _mode == "eager":
        actual = _hash_file(path, span=span)
        if actual is None:
            raise ObjectNotFound(blob_id)
        if actual != blob_id:
            objects.quarantine(blob_id)
            raise CorruptObject(blob_id, actual, str(path))
        with _lock:
            _verified[blob_id] = stamp
        return None
    if batch is not None:
        batch.append(job)
    else:
        submit([job])
    return job


def submit(jobs: list[PendingCheck]) -> None:
    """Queue the checks of *jobs* (emptying the list) for the background thread."""
    if not jobs:
        return
    queued = jobs[:]
    jobs.clear()
    _start_worker()
    _jobs.put(queued)  # one queue item per restore: queue.put costs microseconds


def wait_for_checks() -> None:
    """Block until every queued check has run (tests, benchmarks, before exit)."""
    _jobs.join()


def _hash_file(
    path: str | Path, threads: int = blake3.blake3.AUTO, span: tuple[int, int] | None = None
) -> str | None:
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as whole:
            if span is None:
                return blake3.blake3(whole, max_threads=threads).hexdigest()
            with memoryview(whole) as view:
                part = view[span[0] : span[0] + span[1]]
                try:
                    return blake3.blake3(part, max_threads=threads).hexdigest()
                finally:
                    part.release()
    except FileNotFoundError:
        return None


def _start_worker() -> None:
    global _worker
    with _lock:
        if _worker is not None and _worker.is_alive():
            return
        # A daemon thread: a process may exit before its last check ran.
        _worker = threading.Thread(target=_work, name="memostore-blob-check", daemon=True)
        _worker.start()


def _work() -> None:
    while True:
        batch = _jobs.get()
        try:
            for job in batch:
                try:
                    job.run()
                except Exception as exc:  # a failing check must not kill the worker
                    warnings.warn(
                        f"memostore: could not check blob {job.blob_id}: {exc}",
                        MemostoreWarning,
                        stacklevel=1,
                    )
        finally:
            _jobs.task_done()
