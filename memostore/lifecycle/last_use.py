"""When each evaluation was last used, and how many hits it had.

``gc --max-size`` evicts the least recently used evaluations first, and listings
show hit counts, so every hit and every stored miss is noted here. The record is
``usage/log`` in the store (``docs/format.md``): JSON lines
``{"id": <evaluation id>, "t": <unix time>, "hits": <hits since its last line>}``,
a stored miss being a line with ``hits`` 0. The merged view of an evaluation is
the latest ``t`` and the sum of ``hits`` over its lines.

The hit path must stay fast, so :func:`note_use` only updates a dict under a
lock. A daemon thread, started on the first note, appends what is pending every
``FLUSH_INTERVAL_S`` seconds, and an exit handler appends the rest. The record is
advisory: a write that fails (read-only store, full disk) drops what it held and
never reaches the caller; a process killed before its flush loses at most those
seconds of records.

Concurrency: each flush is one ``write`` on a descriptor opened with
``O_APPEND`` (as the evaluation index does), so lines of concurrent processes do
not interleave; a line torn by a crash fails to parse and is skipped.
:func:`compact` rewrites the file through a temp file and an atomic rename, and
then copies over what other processes appended to the old file meanwhile; an
append made by a process that opened the old file before the rename and wrote
after that copy is lost (a few seconds of one evaluation's use, never a wrong
hit count beyond that).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..odb import jsonlines
from ..odb.fsutil import write_atomically
from ..odb.objects import is_object_id

if TYPE_CHECKING:
    from ..odb.store import Store

USAGE_DIRNAME = "usage"
LOG_FILENAME = "log"
FLUSH_INTERVAL_S = 2.0

# The attribute an in-memory store keeps its record in (it has no directory).
_MEMORY_ATTR = "_last_use"


@dataclass(frozen=True)
class LastUse:
    """One evaluation's use: when it was last stored or hit, and its hit count."""

    last_used: float
    hits: int


# Pending notes of this process, per store root: evaluation id -> [latest time, hits].
# Guarded by _lock, which the caller's path holds only for a dict update.
_lock = threading.Lock()
_pending: dict[Path, dict[str, list[Any]]] = {}
# Serialises flushes, and lets load() see a flush as done or not yet begun: while a
# flush writes, its batch is in neither _pending nor (maybe) the file.
_flush_lock = threading.Lock()
_flusher: threading.Thread | None = None


@dataclass
class _Parsed:
    """A log file parsed up to *consumed* (the end of its last whole line)."""

    inode: int
    size: int
    mtime_ns: int
    consumed: int
    merged: dict[str, LastUse]


# log path -> what this process has parsed of it: see _read().
_loaded: dict[Path, _Parsed] = {}


def log_path(store: Store) -> Path | None:
    """Where the last-use log of *store* lives; None for an in-memory store."""
    if store.root is None:
        return None
    return store.root / USAGE_DIRNAME / LOG_FILENAME


def note_use(store: Store, evaluation_id: str, *, hit: bool) -> None:
    """Note that *evaluation_id* was used now: a hit (``hit=True``) or a stored miss.

    O(1) under a lock, with no file access: the flush thread appends the note
    within ``FLUSH_INTERVAL_S`` seconds, or the exit handler does. Never raises.

    Args:
        store: the store holding the evaluation.
        evaluation_id: the evaluation answered from or just recorded.
        hit: True for a hit (counted), False for a result just stored.
    """
    try:
        now = time.time()
        root = store.root
        if root is None:
            _note_in_memory(store, evaluation_id, now, hit)
            return
        with _lock:
            # Keyed by the root, not the log's path: building a Path costs microseconds.
            pending = _pending.get(root)
            if pending is None:
                pending = _pending[root] = {}
            entry = pending.get(evaluation_id)
            if entry is None:
                pending[evaluation_id] = [now, 1 if hit else 0]
            else:
                entry[0] = now
                if hit:
                    entry[1] += 1
        if _flusher is None:
            _start_flusher()
    except Exception:  # the record is advisory: the call must go on
        return


def flush() -> None:
    """Append every pending note of this process to its store's log now.

    What cannot be written (read-only store, full disk) is dropped. Never raises.
    """
    with _flush_lock:
        global _pending
        with _lock:
            batches, _pending = _pending, {}
        for root, entries in batches.items():
            if entries:
                with contextlib.suppress(Exception):
                    _append(root / USAGE_DIRNAME / LOG_FILENAME, entries)


def load(store: Store) -> dict[str, LastUse]:
    """Every evaluation's last use, merged over the log and this process's pending notes.

    An evaluation never noted has no entry (callers fall back to the time its
    record was started). The parsed file is kept per process while it is
    unchanged (same inode, size and modification time).
    """
    if store.root is None:
        with _lock:
            record = dict(getattr(store, _MEMORY_ATTR, None) or {})
        return {eid: LastUse(t, hits) for eid, (t, hits) in record.items()}
    path = log_path(store)
    assert path is not None
    with _flush_lock:
        merged = dict(_read(path))
        with _lock:
            pending = {eid: tuple(e) for eid, e in _pending.get(store.root, {}).items()}
    _merge(merged, {eid: LastUse(t, hits) for eid, (t, hits) in pending.items()})
    return merged


def compact(store: Store, drop: Iterable[str]) -> None:
    """Rewrite the log with one line per evaluation, none for those of *drop* (atomically).

    Eviction calls it after removing evaluations, so the log does not grow
    without bound. Naming what goes, not what stays, keeps the record of an
    evaluation published while eviction ran. Pending notes of this process are
    flushed first.

    Args:
        store: the store.
        drop: the evaluations whose record goes (those eviction removed).

    Raises:
        OSError: the new log could not be written (the old one is left as it was).
    """
    unwanted = set(drop)
    if store.root is None:
        with _lock:
            record = getattr(store, _MEMORY_ATTR, None)
            if record is not None:
                for eid in unwanted & record.keys():
                    del record[eid]
        return
    path = log_path(store)
    assert path is not None
    flush()
    _remove_old_temp_files(path)
    with _flush_lock:
        try:
            old = open(path, "rb")  # noqa: SIM115 - kept open across the rename below
        except FileNotFoundError:
            return
        with old:
            data = old.read()
            end = data.rfind(b"\n") + 1
            merged = _parse(data[:end])
            lines = b"".join(
                _line(eid, use.last_used, use.hits)
                for eid, use in sorted(merged.items())
                if eid not in unwanted
            )
            write_atomically(path, lines)
            # Appends that reached the old file between our read and the rename: keep
            # those of evaluations not dropped (a torn tail is skipped like any torn line).
            late = _parse(data[end:] + old.read())
        late_entries = {
            eid: [u.last_used, u.hits] for eid, u in late.items() if eid not in unwanted
        }
        if late_entries:
            with contextlib.suppress(OSError):
                _write_once(path, late_entries)


# -- internals ---------------------------------------------------------------------------------


def _remove_old_temp_files(path: Path, older_than_s: float = 3600.0) -> None:
    # Temp files of a compaction killed before its rename; a younger one may be in use.
    cutoff = time.time() - older_than_s
    for tmp in path.parent.glob(f"{LOG_FILENAME}.*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.lstat().st_mtime < cutoff:
                tmp.unlink()


def _note_in_memory(store: Store, evaluation_id: str, now: float, hit: bool) -> None:
    with _lock:
        record = getattr(store, _MEMORY_ATTR, None)
        if record is None:
            record = {}
            setattr(store, _MEMORY_ATTR, record)
        _t, hits = record.get(evaluation_id, (now, 0))
        record[evaluation_id] = (now, hits + (1 if hit else 0))


def _start_flusher() -> None:
    global _flusher
    with _lock:
        if _flusher is not None:
            return
        thread = threading.Thread(target=_flush_loop, name="memostore-last-use", daemon=True)
        _flusher = thread
    thread.start()
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # A child forked by multiprocessing leaves through os._exit, which skips atexit
        # handlers; it runs multiprocessing's own finalizers first.
        mp_util.Finalize(None, flush, exitpriority=0)


def _flush_loop() -> None:
    while True:
        time.sleep(FLUSH_INTERVAL_S)
        flush()


def _append(path: Path, entries: Mapping[str, list[Any]]) -> None:
    try:
        _write_once(path, entries)
    except FileNotFoundError:
        # First use of this store (or usage/ removed): create the directory, retry once.
        # Not its parents: a store deleted meanwhile must stay deleted.
        path.parent.mkdir(exist_ok=True)
        _write_once(path, entries)


def _write_once(path: Path, entries: Mapping[str, list[Any]]) -> None:
    data = b"".join(_line(eid, t, hits) for eid, (t, hits) in entries.items())
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # A last line torn by a crash (or a full disk) has no newline: start on a new line
        # so that only the torn line is lost, not also the first of ours.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        # One write per flush: O_APPEND keeps concurrent processes' lines whole.
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _line(evaluation_id: str, t: float, hits: int) -> bytes:
    return b'{"id":"%s","t":%s,"hits":%d}\n' % (evaluation_id.encode(), repr(t).encode(), hits)


def _read(path: Path) -> dict[str, LastUse]:
    """The merged log (shared: callers copy it), parsing only what was appended since
    the last read while the file is the same one (same inode, not shorter)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            cached = _loaded.get(path)
            if cached is not None and (cached.inode, cached.size, cached.mtime_ns) == (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
            ):
                return cached.merged
            # Lines are only ever appended to one file (compact replaces the file), and
            # merging is a max and a sum: what was parsed stays right, only the tail is new.
            grown = cached is not None and cached.inode == st.st_ino and st.st_size >= cached.size
            start = cached.consumed if grown and cached is not None else 0
            f.seek(start)
            data = f.read()
    except OSError:
        return {}  # none yet, or unreadable: the record is advisory
    end = data.rfind(b"\n") + 1  # a last line without its newline may still be in progress
    merged = dict(cached.merged) if grown and cached is not None else {}
    _merge(merged, _parse(data[:end]))
    _loaded[path] = _Parsed(st.st_ino, st.st_size, st.st_mtime_ns, start + end, merged)
    return merged


def _merge(into: dict[str, LastUse], more: Mapping[str, LastUse]) -> None:
    for eid, use in more.items():
        known = into.get(eid)
        if known is None:
            into[eid] = use
        else:
            into[eid] = LastUse(max(known.last_used, use.last_used), known.hits + use.hits)


def _parse(data: bytes) -> dict[str, LastUse]:
    """Merged entries of whole lines; a line of another shape (torn, damaged) is skipped."""
    parsed = jsonlines.parse(data)
    # Merged as plain lists first: a frozen dataclass per line would cost more than
    # the parse itself on a long log.
    acc: dict[str, list[Any]] = {}
    for entry in parsed:
        # A line of another shape (damage, or written by something else) is skipped.
        try:
            eid, t, hits = entry["id"], entry["t"], entry["hits"]
        except (TypeError, KeyError):
            continue
        if type(hits) is not int or hits < 0 or type(t) not in (float, int):
            continue
        if not math.isfinite(t):
            continue
        known = acc.get(eid)
        if known is not None:
            if t > known[0]:
                known[0] = t
            known[1] += hits
        elif is_object_id(eid):  # checked once per evaluation, not once per line
            acc[eid] = [float(t), hits]
    return {eid: LastUse(t, hits) for eid, (t, hits) in acc.items()}


def _after_fork_in_child() -> None:
    # The parent flushes its own notes; the child starts empty, with fresh locks (one
    # may have been held by another thread at the fork) and no flush thread.
    global _lock, _flush_lock, _pending, _flusher
    _lock = threading.Lock()
    _flush_lock = threading.Lock()
    _pending = {}
    _flusher = None


def _at_exit() -> None:
    flush()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
