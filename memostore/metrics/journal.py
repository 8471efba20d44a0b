"""The append-only journal an evaluation logs into while it runs.

Points are buffered in memory and appended to ``journal/<run_id>.journal`` in
batches: when a batch fills, when the user flushes, and from a background
thread that wakes every :data:`FLUSH_INTERVAL_S` seconds and writes whatever is
pending. So other processes see a point (``memostore show``, ``plot --follow``)
within about that interval of its logging, and a process killed at any moment
loses at most the points of the last interval. The journal is sealed into
content-addressed objects when the evaluation ends (:mod:`.seal`); a journal
whose process died is sealed by the next process that finds it
(:func:`.recover.recover_orphans`). Readers follow a live journal
incrementally with :func:`parse_into`, from the offset where they stopped.

File layout: a sequence of records, each ``b"MJ"``, kind (u8), 0 (u8),
payload length (u32 LE), CRC-32 of the payload (u32 LE), payload. A reader
stops at the first incomplete or damaged record: everything before it is
intact, because records are only ever appended.

Liveness: the writing process holds an exclusive ``flock`` on the file for the
whole evaluation, so the lock is free exactly when that process is gone (the
kernel releases it even on SIGKILL). The background thread also touches an
idle file every :data:`HEARTBEAT_S` seconds, for stores shared between machines
where a lock may not be visible.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
import sys
import threading
import time
import uuid
import weakref
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import warn

REC_HEADER = 1
REC_SCALARS = 2
REC_EVENT = 3

_FRAME = struct.Struct("<2sBBII")
_MARK = b"MJ"
_TAG_HEAD = struct.Struct("<HI")

# Pending points reach the file at most this long after they were logged: the
# live view's latency. Each wake costs one lock and one write per journal with
# points pending, whatever their number, so the cost per point stays constant.
FLUSH_INTERVAL_S = 0.5
HEARTBEAT_S = 30.0
BATCH_POINTS = 16384
BATCH_EVENT_BYTES = 1 << 20
JOURNAL_SUFFIX = ".journal"
# A header describes one call (argument summaries are at most 80 characters each).
_HEADER_MAX = 16 << 20


def frame(kind: int, payload: bytes) -> bytes:
    """One journal record."""
    return _FRAME.pack(_MARK, kind, 0, len(payload), zlib.crc32(payload)) + payload


def _json_bytes(obj: Any) -> bytes:
    # The journal is private and short-lived: NaN and infinities are allowed here
    # (Python's json reads back what it writes).
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")


@dataclass
class Contents:
    """What a journal holds, in logged order.

    Attributes:
        header: the evaluation's description (function, key, run id, ...).
        scalars: tag -> list of (steps, values, walls) byte strings, one per batch.
        events: non-scalar points (text, histogram, image, hparams), in order.
        last_wall: the newest wall time seen (when the process was last alive).
        damaged: True when the file ends in a damaged or incomplete record.
    """

    header: dict[str, Any] | None = None
    scalars: dict[str, list[tuple[bytes, bytes, bytes]]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    last_wall: float | None = None
    damaged: bool = False

    @property
    def empty(self) -> bool:
        return not self.scalars and not self.events


def parse(data: bytes | memoryview) -> Contents:
    """Decode journal bytes, stopping at the first incomplete or damaged record."""
    out = Contents()
    parse_into(out, data)
    return out


def parse_into(out: Contents, data: bytes | memoryview, start: int = 0) -> int:
    """Add the records of *data* from offset *start* to *out*; where the last whole one ends.

    A reader following a live journal calls this with the bytes appended since
    its last read and continues from the offset returned: a record cut short by
    a write still in progress sets ``out.damaged`` and is read again, whole, the
    next time. Each record is applied entirely or not at all.
    """
    view = memoryview(data)
    pos, end = start, len(view)
    while pos < end:
        if end - pos < _FRAME.size:
            out.damaged = True
            break
        mark, kind, _, length, crc = _FRAME.unpack_from(view, pos)
        begin = pos + _FRAME.size
        payload = view[begin : begin + length]
        if mark != _MARK or len(payload) != length or zlib.crc32(payload) != crc:
            out.damaged = True
            break
        try:
            _apply(out, kind, payload)
        except (ValueError, struct.error, UnicodeDecodeError):
            out.damaged = True
            break
        pos = begin + length
    return pos


def read_header(fd: int) -> dict[str, Any] | None:
    """The header of the journal open as *fd* (its first record), or None if unreadable."""
    head = os.pread(fd, _FRAME.size, 0)
    if len(head) < _FRAME.size:
        return None
    mark, kind, _, length, _crc = _FRAME.unpack(head)
    if mark != _MARK or kind != REC_HEADER or length > _HEADER_MAX:
        return None
    out = Contents()
    parse_into(out, os.pread(fd, _FRAME.size + length, 0))
    return out.header


def _apply(out: Contents, kind: int, payload: memoryview) -> None:
    if kind == REC_HEADER:
        out.header = json.loads(bytes(payload))
    elif kind == REC_EVENT:
        event = json.loads(bytes(payload))
        wall = float(event.get("wall", 0.0))
        out.events.append(event)
        out.last_wall = max(out.last_wall or 0.0, wall)
    elif kind == REC_SCALARS:
        # Decoded whole before any of it is added: a damaged batch adds nothing.
        batches = _scalar_batches(payload)
        for tag, steps, values, walls in batches:
            out.scalars.setdefault(tag, []).append((steps, values, walls))
            if walls:
                last = struct.unpack_from("<d", walls, len(walls) - 8)[0]
                out.last_wall = max(out.last_wall or 0.0, last)
    # Unknown kinds come from a newer writer: skipped, the rest stays readable.


def _scalar_batches(payload: memoryview) -> list[tuple[str, bytes, bytes, bytes]]:
    batches = []
    pos = 0
    while pos < len(payload):
        tag_len, count = _TAG_HEAD.unpack_from(payload, pos)
        pos += _TAG_HEAD.size
        tag = bytes(payload[pos : pos + tag_len]).decode("utf-8")
        pos += tag_len
        n = 8 * count
        steps = bytes(payload[pos : pos + n])
        values = bytes(payload[pos + n : pos + 2 * n])
        walls = bytes(payload[pos + 2 * n : pos + 3 * n])
        pos += 3 * n
        if len(walls) != n:
            raise ValueError("truncated scalar batch")
        batches.append((tag, steps, values, walls))
    return batches


def describe_process() -> dict[str, Any]:
    """Where an evaluation runs, for the record of an orphaned journal."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "python": sys.version.split()[0],
    }


class Journal:
    """Buffered, append-only log of one evaluation's points.

    Thread-safe: every method takes the journal's lock, held only for list
    appends except when a batch is written.

    Args:
        directory: the store's ``journal/`` directory, or None to keep the
            records in memory (in-memory stores).
        header: the evaluation's description, written as the first record.
    """

    def __init__(self, directory: Path | None, header: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._scalars: dict[str, tuple[list[int], list[float], list[float]]] = {}
        self._events: list[bytes] = []
        self._pending = 0
        self._pending_bytes = 0
        self._memory: bytearray | None = None
        self._fd: int | None = None
        self.path: Path | None = None
        self.sealed = False
        self.points = 0
        self.step_counter = 0  # for memostore.log(step=None)
        head = frame(REC_HEADER, _json_bytes(header))
        if directory is None:
            self._memory = bytearray(head)
        else:
            self._open_file(directory, header["run_id"], head)
        _register(self)

    def _open_file(self, directory: Path, run_id: str, head: bytes) -> None:
        # Created under a temporary name and locked before it is renamed into
        # view, so another process never sees an unlocked live journal.
        tmp = directory / f"tmp-{os.getpid()}-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(fd, head)
            final = directory / f"{run_id}{JOURNAL_SUFFIX}"
            os.replace(tmp, final)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        self._fd = fd
        self.path = final

    # -- logging (hot path) ------------------------------------------------------------
    def add_scalar(self, tag: str, step: int, value: float, wall: float) -> None:
        """Buffer one scalar point."""
        with self._lock:
            cols = self._scalars.get(tag)
            if cols is None:
                cols = self._scalars[tag] = ([], [], [])
            cols[0].append(step)
            cols[1].append(value)
            cols[2].append(wall)
            self._pending += 1
            if self._pending >= BATCH_POINTS:
                self._flush_locked()

    def add_event(self, event: dict[str, Any]) -> None:
        """Buffer one non-scalar point (JSON-able dict with kind, tag, step, wall)."""
        record = frame(REC_EVENT, _json_bytes(event))
        with self._lock:
            self._events.append(record)
            self._pending += 1
            self._pending_bytes += len(record)
            if self._pending_bytes >= BATCH_EVENT_BYTES:
                self._flush_locked()

    # -- writing -------------------------------------------------------------------------
    def flush(self) -> None:
        """Append every buffered point to the journal."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending:
            return
        parts: list[bytes] = []
        if self._scalars:
            parts.append(frame(REC_SCALARS, self._encode_scalars()))
        parts.extend(self._events)
        self.points += self._pending
        self._scalars = {}
        self._events = []
        self._pending = 0
        self._pending_bytes = 0
        data = b"".join(parts)
        if self._memory is not None:
            self._memory += data
        elif self._fd is not None:
            _write_all(self._fd, data)

    def _encode_scalars(self) -> bytes:
        out: list[bytes] = []
        for tag, (steps, values, walls) in self._scalars.items():
            name = tag.encode("utf-8", "backslashreplace")  # lone surrogates cannot be stored
            try:
                step_bytes = array("q", steps).tobytes()
            except OverflowError:
                steps, values, walls = _drop_huge_steps(tag, steps, values, walls)
                step_bytes = array("q", steps).tobytes()
            out.append(_TAG_HEAD.pack(len(name), len(steps)))
            out.append(name)
            out.append(step_bytes)
            out.append(array("d", values).tobytes())
            out.append(array("d", walls).tobytes())
        return b"".join(out)

    def heartbeat(self) -> None:
        """Tell other machines this journal's process is alive (its mtime)."""
        with self._lock:  # discard() may close the descriptor meanwhile
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.utime(self._fd)

    # -- sealing ---------------------------------------------------------------------------
    def finish(self) -> Contents:
        """Stop accepting points, flush, and return everything logged."""
        with self._lock:
            self._flush_locked()
            self.sealed = True
            if self._memory is not None:
                data: bytes = bytes(self._memory)
            else:
                assert self._fd is not None
                data = _read_all(self._fd)
        _unregister(self)
        return parse(data)

    def discard(self) -> None:
        """Remove the journal file and release its lock (after it was sealed)."""
        with self._lock:
            fd, self._fd = self._fd, None
            if self.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            if fd is not None:
                os.close(fd)  # releases the lock: the file is already gone


def _drop_huge_steps(
    tag: str, steps: list[int], values: list[float], walls: list[float]
) -> tuple[list[int], list[float], list[float]]:
    # Rare path: the hot path does not range-check steps, so points whose step
    # does not fit int64 (as TensorBoard's would not) are dropped here, loudly.
    keep = [i for i, s in enumerate(steps) if -(1 << 63) <= s < (1 << 63)]
    warn(f"dropped {len(steps) - len(keep)} point(s) of {tag!r} whose step does not fit in 64 bits")
    return [steps[i] for i in keep], [values[i] for i in keep], [walls[i] for i in keep]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


# -- the background flusher ---------------------------------------------------------------
_live: weakref.WeakSet[Journal] = weakref.WeakSet()
_live_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None
# The thread ends after this many wakes without a journal (a program that has
# stopped logging, or memoised calls far apart), and starts again with the next one.
_IDLE_WAKES = 20


def _register(journal: Journal) -> None:
    global _thread
    with _live_lock:
        _live.add(journal)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_flush_loop, name="memostore-journal", daemon=True)
            _thread.start()


def _unregister(journal: Journal) -> None:
    with _live_lock:
        _live.discard(journal)


def _flush_loop() -> None:
    global _thread
    last_beat = time.monotonic()
    idle = 0
    while True:
        _wake.wait(FLUSH_INTERVAL_S)
        _wake.clear()
        with _live_lock:
            journals = list(_live)
            idle = 0 if journals else idle + 1
            if idle >= _IDLE_WAKES:
                # Decided under the lock _register takes: a journal registered from
                # now on starts a new thread.
                _thread = None
                return
        now = time.monotonic()
        beat = now - last_beat >= HEARTBEAT_S
        for journal in journals:
            # A failing disk must not kill the thread: the next flush from the
            # logging thread will report the error where the user sees it.
            with contextlib.suppress(Exception):
                # Read without the lock: a count seen stale is flushed next wake.
                if journal._pending:
                    journal.flush()
                elif beat:
                    journal.heartbeat()
        if beat:
            last_beat = now


def _after_fork_in_child() -> None:
    # The child has the parent's buffers (already owned by the parent) and a lock
    # that a vanished thread may hold: start clean, and let the thread restart.
    global _thread, _live_lock
    _live_lock = threading.Lock()
    _thread = None
    for journal in list(_live):
        journal._lock = threading.Lock()
        journal._scalars = {}
        journal._events = []
        journal._pending = 0
        journal._pending_bytes = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
