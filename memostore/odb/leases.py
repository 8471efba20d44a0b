"""Leases: a file per memoised call being computed, naming who computes it.

``leases/<function>/<call key>.json`` (the function part escaped as in ref
names) exists while a process computes that call. Contract:

1. The record (holder's host, pid, process start time, thread, lease id, start
   time, heartbeat interval, expiry) is written to a hidden file of the holder,
   then hard-linked to the lease's name (atomic on local file systems and on
   NFSv3 and later, and refused when the name exists): of several processes
   that miss on one key, exactly one creates it, and a lease never exists
   without its record, whenever its holder dies. Where hard links are not
   supported, creation is ``O_CREAT|O_EXCL`` on the lease's name, the record
   written right after. No fsync: a lease is worthless after a reboot anyway.
2. The heartbeat is the file's modification time. A daemon thread of the
   holding process touches every lease it holds each ``HEARTBEAT_S`` seconds,
   through the descriptor kept open since creation, so it only ever touches its
   own file, never a lease that replaced it.
3. A lease is *stale* when its holder is known dead: on this host, its pid is
   gone or belongs to a process started at another time than the recorded one
   (a reused pid); on another host, once its heartbeat is older than its
   recorded expiry by this host's clock, or has not changed for that long as
   this process watched it (so a clock running behind cannot keep a dead
   holder's lease alive). A live holder on this host is never stale: its pid is
   authoritative, whatever its heartbeat.
4. A stale lease is taken over under a :class:`~memostore.odb.lockfile.LockFile` on
   the lease: the taker reads it again, and only if it is still the very file
   judged stale (same inode and heartbeat) renames its own record over it. Of
   several takers exactly one wins; the others find a live lease.
5. The holder removes its lease when its evaluation is recorded (result or
   failure), checking first that the name still holds its own file.

An empty or unparseable lease (created in place, or damaged) is judged by its
age alone. A hidden record that never took its lease's name is invisible to
waiters; gc removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LockTimeout, MemostoreError
from . import lockfile
from .inside import make_dirs_beneath
from .lockfile import LockFile, create_with_record, pid_alive, process_start_time

LEASES_DIRNAME = "leases"
# Heartbeat interval and expiry of the leases this process creates (waiters read
# both from the lease itself, so a holder that changes them is judged by its own).
HEARTBEAT_S = 5.0
EXPIRES_S = 30.0
# A lease's recorded expiry is clamped to this range: a damaged record must not
# make every lease stale at once, nor none ever.
_EXPIRES_RANGE = (0.5, 24 * 3600.0)
_READ_MAX = 4096
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def lease_path(root: str, ref: str) -> str:
    """The lease file of the call whose ref is *ref* (``evals/<function>/<key>``)."""
    _, function, key = ref.split("/", 2)
    return os.path.join(root, LEASES_DIRNAME, function, f"{key}.json")


@dataclass(frozen=True)
class LeaseView:
    """One read of a lease file: its identity, heartbeat and record.

    Attributes:
        ident: (device, inode, mtime in ns): the same file with the same heartbeat.
        heartbeat: the lease's modification time (Unix time, by the writer's clock).
        record: the parsed record, or None while it is being written (or damaged).
    """

    ident: tuple[int, int, int]
    heartbeat: float
    record: dict[str, Any] | None

    @property
    def host(self) -> str | None:
        host = (self.record or {}).get("host")
        return host if isinstance(host, str) else None

    @property
    def pid(self) -> int | None:
        pid = (self.record or {}).get("pid")
        return pid if type(pid) is int else None

    @property
    def expires_s(self) -> float:
        value = (self.record or {}).get("expires_s")
        if type(value) not in (int, float) or value != value:
            return EXPIRES_S
        return min(max(float(value), _EXPIRES_RANGE[0]), _EXPIRES_RANGE[1])

    @property
    def started(self) -> float | None:
        value = (self.record or {}).get("started")
        return float(value) if type(value) in (int, float) else None

    def holder_text(self) -> str:
        """Who holds the lease, for messages: "pid 123 on host-a" (with the thread)."""
        if self.pid is None:
            return "an unknown holder (its lease has no readable record)"
        thread = (self.record or {}).get("thread")
        local = self.host == lockfile.HOST and self.pid == os.getpid()
        where = "this process" if local else f"pid {self.pid} on {self.host}"
        return f"{where} (thread {thread})" if local and thread else where


def read_lease(path: str) -> LeaseView | None:
    """The lease at *path*, or None when there is none.

    Opened and stat-ed through one descriptor: on NFS, opening revalidates the
    file's attributes (close-to-open), so the heartbeat seen is current.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MemostoreError(f"the lease {path} is not a regular file; delete it")
        data = os.read(fd, _READ_MAX)
    finally:
        os.close(fd)
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        record = None
    return LeaseView((st.st_dev, st.st_ino, st.st_mtime_ns), st.st_mtime, record)


def holder_dead_here(view: LeaseView) -> bool:
    """True if the lease's holder is on this host and is known to be gone."""
    if view.host != lockfile.HOST or view.pid is None:
        return False
    if view.pid == os.getpid():
        # This very process: a lease it holds is in _held; any other one naming
        # this pid was left by an earlier process that had it.
        return not _heartbeat.holds(view.ident[:2])
    recorded = (view.record or {}).get("process_started")
    if type(recorded) in (int, float):
        if not pid_alive(view.pid):
            return True
        now_started = process_start_time(view.pid)
        # /proc dates processes to the clock tick, from a boot time rounded to the
        # second: within a second is the same process.
        return now_started is not None and abs(now_started - float(recorded)) > 1.0
    return not pid_alive(view.pid, view.started)


class Watch:
    """A waiter's view of the leases it watched: when each heartbeat was first seen."""

    def __init__(self) -> None:
        self._seen: tuple[tuple[int, int, int], float] | None = None

    def is_stale(self, view: LeaseView) -> bool:
        """Whether the lease's holder is gone (see the module's contract, point 3)."""
        now_mono = time.monotonic()
        if self._seen is None or self._seen[0] != view.ident:
            self._seen = (view.ident, now_mono)
        if view.host == lockfile.HOST and view.pid is not None:
            return holder_dead_here(view)
        expires = view.expires_s
        unchanged_for = now_mono - self._seen[1]
        return time.time() - view.heartbeat > expires or unchanged_for > expires


class Lease:
    """A lease this process holds: released once, and heartbeaten until then."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        st = os.fstat(fd)
        self._ident = (st.st_dev, st.st_ino)
        _heartbeat.add(self._ident, fd)

    def release(self) -> None:
        """Remove the lease, if its name still holds this holder's file; close it."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _heartbeat.remove(self._ident)
        try:
            st = os.lstat(self.path)
            # Taken over (the holder was judged gone): the name is another's lease now.
            # A takeover between this check and the unlink needs this live holder to
            # be judged dead at that very moment; it would cost a second computation.
            if (st.st_dev, st.st_ino) == self._ident:
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _record(function: str, key: str) -> bytes:
    """The lease's record: one JSON object and a newline."""
    pid = os.getpid()
    if _process[0] != pid:  # once per process (and again in a forked child)
        _process[:] = [pid, process_start_time(pid)]
    record = {
        "host": lockfile.HOST,
        "pid": pid,
        "process_started": _process[1],
        "thread": threading.get_ident(),
        "id": os.urandom(16).hex(),
        "function": function,
        "key": key,
        "started": time.time(),
        "heartbeat_s": HEARTBEAT_S,
        "expires_s": EXPIRES_S,
    }
    return json.dumps(record).encode() + b"\n"


# (pid, its start time): the start time is read from /proc once per process.
_process: list[Any] = [None, None]


def try_create(root: str, path: str, function: str, key: str) -> Lease | None:
    """Create the lease at *path*; None when another caller holds it.

    Created with its record already in it (:func:`~.lockfile.create_with_record`):
    a holder killed between creating the file and writing it would otherwise
    leave a lease that names no process, which waiters can only judge by its
    age (30 s each).

    Raises:
        OSError: the store refuses the file (read-only, full, ...).
    """
    record = _record(function, key)
    try:
        try:
            fd = create_with_record(path, record, _OPEN_FLAGS)
        except FileNotFoundError:
            # The function's first lease: its directory, made beneath the store's
            # root, never through a link planted there.
            make_dirs_beneath(root, os.path.relpath(os.path.dirname(path), root))
            fd = create_with_record(path, record, _OPEN_FLAGS)
    except FileExistsError:
        return None
    return Lease(path, fd)


def take_over(path: str, judged: LeaseView, function: str, key: str) -> Lease | None:
    """Replace the stale lease *judged* by one of this process; None if another won.

    Under the lease's lock: only if *path* is still the file judged stale (same
    inode, same heartbeat) is a new record renamed over it.
    """
    lock = LockFile(Path(path), timeout=EXPIRES_S)
    try:
        lock.acquire()
    except (LockTimeout, OSError):
        return None
    try:
        current = read_lease(path)
        if current is None or current.ident != judged.ident:
            return None
        scratch = os.path.join(
            os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}"
        )
        fd = os.open(scratch, _OPEN_FLAGS, 0o644)
        try:
            os.write(fd, _record(function, key))
            os.replace(scratch, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(scratch)
            raise
        return Lease(path, fd)
    finally:
        lock.release()


def remove_if_stale(path: str, older_than: float, dry_run: bool) -> int:
    """Delete the lease at *path* if its holder is gone; return the bytes freed (0: kept).

    For gc: a lease of this host goes once its holder is dead; one of another
    host once its heartbeat is older than both *older_than* and its expiry.
    """
    view = read_lease(path)
    if view is None:
        return 0
    if view.host == lockfile.HOST and view.pid is not None:
        stale = holder_dead_here(view)
    else:
        stale = view.heartbeat < min(older_than, time.time() - view.expires_s)
    if not stale:
        return 0
    size = len(json.dumps(view.record)) if view.record else 0
    if dry_run:
        return max(size, 1)
    lock = LockFile(Path(path), timeout=5.0)
    try:
        lock.acquire()
    except (LockTimeout, OSError):
        return 0
    try:
        current = read_lease(path)
        if current is None or current.ident != view.ident:
            return 0  # taken over meanwhile: a live holder's now
        os.unlink(path)
    except OSError:
        return 0
    finally:
        lock.release()
    return max(size, 1)


def _remove_old_scratch(path: str, older_than: float, dry_run: bool) -> int:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_mtime >= older_than:
        return 0
    if not dry_run:
        os.unlink(path)
    return max(st.st_size, 1)


def remove_stale_leases(root: str, older_than: float, dry_run: bool) -> tuple[int, int]:
    """(count, bytes) of the leases under ``leases/`` whose holders are gone, removed."""
    count = size = 0
    base = os.path.join(root, LEASES_DIRNAME)
    if os.path.islink(base):
        return 0, 0
    scratch_before = min(older_than, time.time() - EXPIRES_S)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                if name.startswith("."):
                    # A record that never took its lease's name: its writer was
                    # killed in the microseconds between (see try_create).
                    freed = _remove_old_scratch(path, scratch_before, dry_run)
                elif name.endswith(".json"):
                    freed = remove_if_stale(path, older_than, dry_run)
                else:
                    continue
            except (OSError, MemostoreError):
                continue
            if freed:
                count, size = count + 1, size + freed
    return count, size


class _Heartbeat:
    """The daemon thread that touches every lease this process holds."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def holds(self, ident: tuple[int, int]) -> bool:
        return ident in self._held

    def add(self, ident: tuple[int, int], fd: int) -> None:
        with self._lock:
            self._held[ident] = fd
            if self._thread is None:
                # Started once, then kept: a thread start per miss would cost more
                # than the lease itself.
                self._thread = threading.Thread(
                    target=self._run, name="memostore-lease-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, ident: tuple[int, int]) -> None:
        with self._lock:
            self._held.pop(ident, None)

    def _run(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self._lock:
                fds = list(self._held.values())
                # Under the lock: a lease released meanwhile closes its fd only
                # after leaving _held, so no fd here is closed (or reused) yet.
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.utime(fd)

    def after_fork(self) -> None:
        # The child has no heartbeat thread, and holds none of its parent's leases.
        self._held.clear()
        self._thread = None
        self._lock = threading.Lock()


_heartbeat = _Heartbeat()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_heartbeat.after_fork)

__all__ = [
    "EXPIRES_S",
    "HEARTBEAT_S",
    "LEASES_DIRNAME",
    "Lease",
    "LeaseView",
    "Watch",
    "lease_path",
    "read_lease",
    "remove_stale_leases",
    "take_over",
    "try_create",
]
