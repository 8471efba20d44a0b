"""Lock files in the manner of git's ``lockfile.h``.

Contract and calling sequence:

1. ``LockFile(path).acquire()`` creates ``path + ".lock"``, holding the
   holder's pid, host and start time from the moment it exists (written to a
   hidden file first, then hard-linked to the lock's name; O_CREAT|O_EXCL where
   hard links are not supported). Exactly one process (on any machine sharing
   the file system) succeeds.
2. The holder either calls ``commit(data)``: *data* is written to
   ``path + ".lock.new"`` (a file only the holder writes), fsynced and renamed
   over *path*, then the lock is released; or it calls ``release()`` to drop
   the lock and leave *path* untouched. The lock file keeps naming its holder
   until it is removed, so a holder killed at any step leaves a lock that
   waiters can judge.
3. A lock whose holder died is stale: at once when its holder is on this host
   and its pid no longer exists, or belongs to a process started after the lock
   was taken (a reused pid; Linux ``/proc`` dates processes); otherwise (another
   host, whose pids cannot be checked; a reused pid that cannot be dated; a lock
   whose holder died before it could record itself) once it is older than
   ``stale_after`` seconds, since a
   holder never keeps a lock for more than the few milliseconds of file I/O of
   one update. ``timeout`` is longer than ``stale_after``, so a waiter outlasts
   any stale lock rather than failing on it. A waiter breaks a stale lock by
   renaming it away, never by unlinking a path it did not just inspect, so two
   waiters cannot delete each other's fresh locks.

On a network file system, pids of other hosts cannot be checked: a lock whose
holder died there is broken by age only, and a holder paused for longer than
``stale_after`` while holding a lock can lose it (as with any lock on a shared
file system without leases).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import LockTimeout
from .fsutil import write_all

HOST = socket.gethostname()
# Makes what was written to a descriptor durable (os.fsync, or a store's barrier).
Flush = Callable[[int], None]
# What link() fails with where a file system has no hard links (FAT, some FUSE
# and SMB mounts).
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}
)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def pid_alive(pid: int, since: float | None = None) -> bool:
    """True if a process with this pid exists on this host.

    With *since* (the Unix time the pid was recorded), a process that started
    later is not the one recorded: its pid was reused, so the recorded process
    is gone. Processes started within a second of *since* count as the same
    (the boot time Linux reports is rounded to the second).
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if since is not None:
        started = process_start_time(pid)
        if started is not None and started > since + 1.0:
            return False
    return True


def process_start_time(pid: int) -> float | None:
    """When process *pid* started (Unix time), where ``/proc`` says; else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        # Field 22 of /proc/PID/stat (the 20th after the command name): start time
        # in clock ticks since boot.
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def create_with_record(path: str, record: bytes, flags: int = _CREATE_FLAGS) -> int:
    """Create *path* with *record* already in it; its descriptor, open for writing.

    The record goes into a hidden file of our own, which is then hard-linked to
    *path*: the link is atomic and refused when the name exists, on local and
    network file systems alike, so the file never exists without its record (a
    creator killed in between would leave a lock or lease naming no holder,
    which others could only judge by its age). Where hard links are not
    supported, *path* is created in place and the record written right after.

    Raises:
        FileExistsError: *path* exists.
        FileNotFoundError: its directory does not.
    """
    directory, name = os.path.split(path)
    scratch = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}")
    fd = os.open(scratch, flags, 0o644)
    try:
        try:
            os.write(fd, record)
            os.link(scratch, path, follow_symlinks=False)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(scratch)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _NO_HARD_LINKS:
            return _create_in_place(path, record, flags)
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def _create_in_place(path: str, record: bytes, flags: int) -> int:
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, record)
    except BaseException:
        # A full disk can refuse even these few bytes: leave no file behind.
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    return fd


class LockFile:
    """An exclusive lock on *path*, held as the file ``path.lock``."""

    def __init__(
        self,
        path: Path | str,
        timeout: float = 60.0,
        stale_after: float = 30.0,
    ) -> None:
        # Plain strings, not Path objects: every ref update and deletion makes a
        # lock, and building paths with pathlib was a fifth of a ref deletion's CPU.
        self.path = os.fspath(path)
        self.lock_path = self.path + ".lock"
        self.new_path = self.path + ".lock.new"
        self.timeout = timeout
        self.stale_after = stale_after
        self._fd: int | None = None

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.0005
        while True:
            try:
                record = json.dumps({"pid": os.getpid(), "host": HOST, "time": time.time()})
                fd = create_with_record(self.lock_path, record.encode() + b"\n")
            except FileNotFoundError:
                os.makedirs(os.path.dirname(self.lock_path) or ".", exist_ok=True)
                continue
            except FileExistsError:
                if self._break_if_stale():
                    continue
                if time.monotonic() > deadline:
                    raise LockTimeout(str(self.lock_path), self._holder_text()) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            self._fd = fd
            return

    def commit(self, data: bytes, flush: Flush | None = None) -> None:
        """Replace *path* with *data* (made durable first), then release the lock.

        *flush* makes the written descriptor durable: an fsync unless given (the
        store passes its barrier, which covers the new objects and this at once).
        """
        assert self._fd is not None, "commit() without acquire()"
        try:
            fd = os.open(self.new_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, memoryview(data))
                (flush or os.fsync)(fd)
            finally:
                os.close(fd)
            # The rename is not fsynced: after a power loss the newest update may
            # be missing (that call is recomputed), never torn, and the objects it
            # names were made durable before it (docs/reliability.md, Durability).
            os.replace(self.new_path, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.new_path)
            self.release()
            raise
        self.release()

    def release(self) -> None:
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)

    def __enter__(self) -> LockFile:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- stale locks ----------------------------------------------------------------
    def _read_holder(self) -> tuple[dict | None, os.stat_result | None]:
        try:
            st = os.stat(self.lock_path)
            with open(self.lock_path, "rb") as f:
                first = f.readline()
        except FileNotFoundError:
            return None, None
        try:
            holder = json.loads(first)
        except ValueError:
            holder = None
        if not isinstance(holder, dict):
            # Created a moment ago and not written yet, or its holder died in between.
            holder = None
        return holder, st

    def _holder_text(self) -> str:
        holder, _ = self._read_holder()
        if not holder:
            return "an unknown process"
        return f"pid {holder.get('pid')} on {holder.get('host')}"

    def _is_stale(self, holder: dict | None, st: os.stat_result | None) -> bool:
        if st is None:
            return False
        if holder and holder.get("host") == HOST and isinstance(holder.get("pid"), int):
            recorded = holder.get("time")
            since = float(recorded) if isinstance(recorded, (int, float)) else None
            if not pid_alive(holder["pid"], since):
                return True
        # Another host's pid cannot be checked, a live pid here may be a reused one
        # that /proc cannot date, and a lock with no record lost its holder between
        # creating and writing it: the lock's age decides.
        return time.time() - st.st_mtime > self.stale_after

    def _break_if_stale(self) -> bool:
        holder, st = self._read_holder()
        if st is None or not self._is_stale(holder, st):
            return False
        # Rename rather than unlink: only the lock we inspected moves away. If a
        # fresh lock replaced it meanwhile, we moved a live lock: put it back.
        aside = f"{self.lock_path}.stale-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.lock_path, aside)
        except FileNotFoundError:
            return True
        if not _same_file(st, aside):
            with contextlib.suppress(OSError):
                os.link(aside, self.lock_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        return True


def _same_file(inspected: os.stat_result, path: str) -> bool:
    """True if *path* is still the file *inspected* was taken of (a rename keeps both)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino, st.st_mtime_ns) == (
        inspected.st_dev,
        inspected.st_ino,
        inspected.st_mtime_ns,
    )
