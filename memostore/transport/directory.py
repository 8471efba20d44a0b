"""A remote that is a directory: a shared or network file system (``/path``, ``file:///path``).

Atomicity comes from the file system's own atomic operations, which NFS and
the common cluster file systems keep:

- every write goes to a temporary file in the target's directory, is fsynced,
  then renamed over the target (``os.replace``), so readers see the old or the
  new file whole;
- ``add_if_new`` hard-links the finished temporary file to the target name;
  ``link`` fails if the name exists, which makes create-if-absent atomic even
  where ``O_EXCL`` on the final name would expose a partly written file. A
  store's own object files, which never change, are hard-linked directly when
  the remote is on the same file system (no bytes copied);
- ``set_if_equals`` holds ``NAME.lock`` (see :mod:`memostore.lockfile`) while
  it reads, compares and replaces (temporary file + rename, as above).

Temporary files start with ``.`` and are skipped by :meth:`list`; a writer
killed mid-copy leaves one behind, which is harmless.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import LockTimeout
from ..fsutil import fsync_dir
from ..lockfile import LockFile
from .base import (
    NotFoundOnRemote,
    RemoteError,
    RemoteUnreachable,
    Transport,
    _is_reserved,
    as_bytes_or_path,
    local_file,
    temp_name,
    validate_name,
    validate_prefix,
)

# errno values meaning "the file system is gone", not "this file is wrong".
_UNREACHABLE_ERRNOS = {
    errno.ESTALE,
    errno.EIO,
    errno.ENOTCONN,
    errno.EHOSTDOWN,
    errno.EHOSTUNREACH,
    errno.ETIMEDOUT,
}
# errno values of a file system that cannot hard-link (FAT, some FUSE and SMB mounts).
_NO_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}


class DirectoryTransport(Transport):
    """A remote kept as plain files under a directory.

    Args:
        root: the remote's directory.
        create: create *root* (and parents) on the first write. With False, a
            missing root raises :class:`RemoteUnreachable` (e.g. an unmounted
            network share) instead of silently starting a new remote.
        fsync: fsync each file (and its directory) before it becomes visible.
            Turn off only for throwaway remotes.
        hardlinks: hard-link the immutable files of a local store when the
            remote is on the same file system (as ``git clone`` does for a
            local repository), instead of copying their bytes. The remote
            and the store then share those files' disk space.
        lock_timeout: seconds ``set_if_equals`` waits for a held lock.
        lock_stale_after: age in seconds after which a lock left by a process on
            another host is broken (on this host, as soon as its pid is gone).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        create: bool = True,
        fsync: bool = True,
        hardlinks: bool = True,
        lock_timeout: float = 30.0,
        lock_stale_after: float = 60.0,
    ) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(os.fspath(root))))
        self.url = self.root.as_uri()
        self.create = create
        self.fsync = fsync
        self.hardlinks = hardlinks
        self.lock_timeout = lock_timeout
        self.lock_stale_after = lock_stale_after

    # -- helpers -------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        return self.root.joinpath(*validate_name(name).split("/"))

    def _check_root(self) -> None:
        if not self.create and not self.root.is_dir():
            raise RemoteUnreachable(
                f"remote directory {self.root} does not exist; mount it or create it "
                f"(mkdir -p {self.root})"
            )

    def _make_parent(self, path: Path) -> None:
        self._check_root()
        path.parent.mkdir(parents=True, exist_ok=True)

    def _translate(self, exc: OSError, action: str, name: str) -> RemoteError:
        where = f"{action} {name} on {self.url}"
        if exc.errno in _UNREACHABLE_ERRNOS:
            return RemoteUnreachable(
                f"{where}: {exc.strerror}; check that the file system is mounted"
            )
        if isinstance(exc, PermissionError):
            return RemoteError(f"{where}: permission denied; check the directory's owner and mode")
        if exc.errno == errno.ENOSPC:
            return RemoteError(f"{where}: no space left on the remote's disk")
        return RemoteError(f"{where}: {exc}")

    @contextlib.contextmanager
    def _os_errors(self, action: str, name: str) -> Iterator[None]:
        try:
            yield
        except RemoteError:
            raise  # RemoteUnreachable is an OSError too; never wrap twice
        except OSError as exc:
            raise self._translate(exc, action, name) from exc

    def _sync_file(self, path: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_dir(self, path: Path) -> None:
        # Makes the rename itself durable; not every file system allows it.
        if self.fsync:
            fsync_dir(path)

    def _write_temp(self, target: Path, data: bytes | Path) -> Path:
        """A finished, fsynced temporary copy of *data* beside *target*."""
        tmp = target.with_name(temp_name(target.name))
        try:
            if isinstance(data, Path):
                # copyfile uses sendfile/copy_file_range where the OS has them.
                shutil.copyfile(data, tmp)
                self._sync_file(tmp)
            else:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _replace_with(self, target: Path, data: bytes | Path) -> None:
        tmp = self._write_temp(target, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._sync_dir(target.parent)

    # -- the contract ----------------------------------------------------------------
    def put_bytes(self, name: str, data: bytes) -> None:
        target = self._path(name)
        with self._os_errors("writing", name):
            self._make_parent(target)
            self._replace_with(target, bytes(data))

    def put_file(self, name: str, path: Path) -> None:
        target = self._path(name)
        src = local_file(path)
        with self._os_errors("writing", name):
            self._make_parent(target)
            self._replace_with(target, src)

    def add_if_new(self, name: str, data: bytes | Path, *, link: bool = False) -> bool:
        target = self._path(name)
        data = as_bytes_or_path(data)
        with self._os_errors("adding", name):
            if os.path.lexists(target):
                return False  # skip the copy; link() below settles races
            self._make_parent(target)
            if link and self.hardlinks and isinstance(data, Path):
                linked = self._link_immutable(data, target)
                if linked is not None:
                    return linked
            tmp = self._write_temp(target, data)
            try:
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    return False
                except OSError as exc:
                    if exc.errno not in _NO_LINK_ERRNOS:
                        raise
                    # No hard links here: check-then-rename. Two racing writers
                    # may both report True, but both wrote the same immutable
                    # content and readers still never see a partial file.
                    if os.path.lexists(target):
                        return False
                    os.replace(tmp, target)
                self._sync_dir(target.parent)
                return True
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _link_immutable(self, src: Path, target: Path) -> bool | None:
        """Hard-link *src*, a file that never changes, as *target*.

        True if linked, False if *target* exists already, None where this file
        system cannot link *src* there (another device, no hard links, not the
        owner under ``fs.protected_hardlinks``): the caller copies instead. The
        file's bytes are as durable as the store made them; the new name is
        made durable with its directory.
        """
        try:
            os.link(src, target)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno == errno.EXDEV or exc.errno in _NO_LINK_ERRNOS:
                return None
            raise
        self._sync_dir(target.parent)
        return True

    def get_bytes(self, name: str) -> bytes:
        path = self._path(name)
        with self._os_errors("reading", name):
            self._check_root()
            try:
                with open(path, "rb") as f:
                    return f.read()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                raise NotFoundOnRemote(name, self.url) from None

    def get_file(self, name: str, dest: Path) -> None:
        src = self._path(name)
        dest = Path(dest)
        with self._os_errors("downloading", name):
            self._check_root()
            if not src.is_file():
                raise NotFoundOnRemote(name, self.url)
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(temp_name(dest.name))
            try:
                try:
                    shutil.copyfile(src, tmp)
                except (FileNotFoundError, IsADirectoryError) as exc:
                    if not src.is_file():  # deleted since the check above
                        raise NotFoundOnRemote(name, self.url) from exc
                    raise
                self._sync_file(tmp)
                os.replace(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def stat(self, name: str) -> int | None:
        path = self._path(name)
        with self._os_errors("inspecting", name):
            self._check_root()
            try:
                st = path.stat()
            except (FileNotFoundError, NotADirectoryError):
                return None
            return st.st_size if path.is_file() else None

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        with self._os_errors("listing", prefix or "/"):
            self._check_root()
        # Walk only the directory the prefix names ("objects/ab" -> objects/).
        start = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        return self._walk(start, prefix)

    def _walk(self, start: str, prefix: str) -> Iterator[str]:
        stack = [start]
        while stack:
            rel_dir = stack.pop()
            directory = self.root.joinpath(*rel_dir.split("/")) if rel_dir else self.root
            try:
                with os.scandir(directory) as entries:
                    found = list(entries)
            except (FileNotFoundError, NotADirectoryError):
                continue  # absent, or removed while we walked
            except OSError as exc:
                raise self._translate(exc, "listing", rel_dir or "/") from exc
            for entry in found:
                if _is_reserved(entry.name) or "\\" in entry.name:
                    continue
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.is_dir(follow_symlinks=False):
                    # Descend only where names can still match the prefix.
                    if prefix.startswith(rel + "/") or rel.startswith(prefix):
                        stack.append(rel)
                elif rel.startswith(prefix) and entry.is_file():
                    yield rel

    def delete(self, name: str) -> None:
        path = self._path(name)
        with self._os_errors("deleting", name):
            self._check_root()
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                os.unlink(path)

    def set_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        path = self._path(name)
        new = bytes(new)
        with self._os_errors("updating", name):
            self._make_parent(path)
            lock = LockFile(path, timeout=self.lock_timeout, stale_after=self.lock_stale_after)
            try:
                lock.acquire()
            except LockTimeout as exc:
                raise RemoteError(f"cannot update {name} on {self.url}: {exc}") from exc
            try:
                # Read while holding the lock: only writers holding it change the file.
                try:
                    with open(path, "rb") as f:
                        current: bytes | None = f.read()
                except FileNotFoundError:
                    current = None
                if current != old:
                    return False
                # A temporary file of our own, not LockFile.commit(): the lock file
                # keeps holding only its holder's record, which waiters parse.
                self._replace_with(path, new)
                return True
            finally:
                lock.release()
