"""Lock files in the manner of git's ``lockfile.h``.

Contract and calling sequence:

1. ``LockFile(path).acquire()`` creates ``path + ".lock"`` with O_CREAT|O_EXCL.
   Exactly one process (on any machine sharing the file system) succeeds; the
   file records the holder's pid, host and start time.
2. The holder may write the new content of *path* into the lock file
   (``commit(data)``): it is fsynced and renamed over *path*, which releases the
   lock in the same atomic step. Or it calls ``release()`` to drop the lock and
   leave *path* untouched.
3. A lock whose holder died is stale: on the same host when its pid no longer
   exists, anywhere once it is older than ``stale_after`` seconds (a holder
   never keeps a lock for more than a few milliseconds of file I/O). A waiter
   breaks a stale lock by renaming it away, never by unlinking a path it did not
   just inspect, so two waiters cannot delete each other's fresh locks.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from pathlib import Path

from .errors import LockTimeout

HOST = socket.gethostname()


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LockFile:
    """An exclusive lock on *path*, held as the file ``path.lock``."""

    def __init__(self, path: Path, timeout: float = 30.0, stale_after: float = 60.0) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.timeout = timeout
        self.stale_after = stale_after
        self._fd: int | None = None

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.0005
        info = json.dumps({"pid": os.getpid(), "host": HOST, "time": time.time()}).encode()
        while True:
            try:
                fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:
                self.lock_path.parent.mkdir(parents=True, exist_ok=True)
                continue
            except FileExistsError:
                if self._break_if_stale():
                    continue
                if time.monotonic() > deadline:
                    raise LockTimeout(str(self.lock_path), self._holder_text()) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            os.write(fd, info + b"\n")
            self._fd = fd
            return

    def commit(self, data: bytes) -> None:
        """Replace *path* with *data* and release the lock, atomically."""
        assert self._fd is not None, "commit() without acquire()"
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock_path)
            raise
        os.close(fd)
        os.replace(self.lock_path, self.path)

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
    def _read_holder(self) -> tuple[dict | None, float | None]:
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
            # The holder may already be writing the new ref content into the lock.
            holder = None
        return holder, st.st_mtime

    def _holder_text(self) -> str:
        holder, _ = self._read_holder()
        if not holder:
            return "an unknown process"
        return f"pid {holder.get('pid')} on {holder.get('host')}"

    def _is_stale(self, holder: dict | None, mtime: float | None) -> bool:
        if mtime is None:
            return False
        age = time.time() - mtime
        if holder and holder.get("host") == HOST and isinstance(holder.get("pid"), int):
            return not pid_alive(holder["pid"])
        # Unknown content (a holder killed before it wrote its pid) or another host.
        return age > self.stale_after

    def _break_if_stale(self) -> bool:
        holder, mtime = self._read_holder()
        if not self._is_stale(holder, mtime):
            return False
        # Rename rather than unlink: only the lock we inspected moves away. If a
        # fresh lock replaced it meanwhile, we moved a live lock: put it back.
        aside = self.lock_path.with_name(self.lock_path.name + f".stale-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(self.lock_path, aside)
        except FileNotFoundError:
            return True
        moved, _ = self._read_aside(aside)
        if moved != holder:
            with contextlib.suppress(OSError):
                os.link(aside, self.lock_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        return True

    @staticmethod
    def _read_aside(path: Path) -> tuple[dict | None, None]:
        try:
            with open(path, "rb") as f:
                holder = json.loads(f.readline())
        except (OSError, ValueError):
            return None, None
        return (holder if isinstance(holder, dict) else None), None
