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
- ``set_if_equals`` holds ``NAME.lock`` (see :mod:`memostore.odb.lockfile`) while
  it reads, compares and replaces (temporary file + rename, as above).

Temporary files start with ``.`` and are skipped by :meth:`list`; a writer
killed mid-copy leaves one behind, which is harmless.

Directories are made as names need them; gc of a remote removes the empty
ones under ``leases/`` (:meth:`DirectoryTransport.remove_empty_dirs`). A
writer that walked into a directory just before it was removed walks again
(:meth:`DirectoryTransport._in_parent`), which makes it anew.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..errors import LockTimeout
from ..odb.beneath import (
    CREATE_FLAGS,
    check_not_link,
    open_file,
    open_parent,
    open_root,
    open_subdir,
    proc_path,
)
from ..odb.filecopy import copy_fd
from ..odb.lockfile import LockFile
from .base import (
    Listed,
    NotFoundOnRemote,
    RemoteError,
    RemoteObjectTooLarge,
    RemoteUnreachable,
    Transport,
    as_bytes_or_path,
    is_reserved,
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
_READ_CHUNK = 8 << 20
# Walks to a name's directory before a write gives up on finding it in place: each
# retry follows a removal of that (empty) directory between the walk and the write.
_WALKS = 3
# A write in a directory removed since it was opened: ENOENT (ESTALE on NFS).
_REMOVED_ERRNOS = {errno.ENOENT, errno.ESTALE}
_T = TypeVar("_T")
# rmdir's refusals that leave a directory to its users: not empty, gone, not one.
_NOT_REMOVED_ERRNOS = {errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR}


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
        """Where *name* is (for messages: every operation walks to it without links)."""
        return self.root.joinpath(*validate_name(name).split("/"))

    def _check_root(self) -> None:
        if not self.create and not self.root.is_dir():
            raise RemoteUnreachable(
                f"remote directory {self.root} does not exist; mount it or create it "
                f"(mkdir -p {self.root})"
            )

    @contextlib.contextmanager
    def _parent(self, name: str, *, create: bool) -> Iterator[tuple[int, str]]:
        """(descriptor of the directory holding *name*, its last part), walked from the
        root without following a link (see :mod:`.beneath`); *create* makes missing
        directories. A missing directory on the way raises FileNotFoundError."""
        parts = validate_name(name).split("/")
        self._check_root()
        try:
            dir_fd = open_parent(self.root, parts, self.url, create=create)
        except FileNotFoundError:
            if not create:
                raise
            # The first write makes the root (another thread may be making it too).
            self.root.mkdir(parents=True, exist_ok=True)
            dir_fd = open_parent(self.root, parts, self.url, create=create)
        try:
            yield dir_fd, parts[-1]
        finally:
            os.close(dir_fd)

    def _in_parent(self, name: str, write: Callable[[int, str], _T]) -> _T:
        """``write(descriptor of the directory holding name, last part)``, that
        directory made if missing, and walked again if it vanished meanwhile.

        gc removes empty directories under ``leases/``: one may go between the
        walk to it and the write in it (an empty directory was just made, or
        its last name deleted). The write then fails with ENOENT (ESTALE on
        NFS) and is made again after a fresh walk. A write that fails so for
        another reason fails the same way each time, and raises after the last.
        """
        walks = 1
        while True:
            try:
                with self._parent(name, create=True) as (fd, leaf):
                    return write(fd, leaf)
            except OSError as exc:
                if walks >= _WALKS or exc.errno not in _REMOVED_ERRNOS:
                    raise
            walks += 1

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

    def _sync_dir(self, dir_fd: int) -> None:
        # Makes the rename itself durable; not every file system allows it.
        if self.fsync:
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)

    def _write_temp(self, dir_fd: int, leaf: str, data: bytes | Path) -> str:
        """The name of a finished, fsynced temporary copy of *data* beside *leaf*."""
        tmp = temp_name(leaf)
        fd = os.open(tmp, CREATE_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            if isinstance(data, Path):
                src = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    copy_fd(src, fd, os.fstat(src).st_size)
                finally:
                    os.close(src)
            else:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)
        return tmp

    def _replace_with(self, dir_fd: int, leaf: str, data: bytes | Path) -> None:
        tmp = self._write_temp(dir_fd, leaf, data)
        try:
            # rename() replaces a link at *leaf* itself; it never writes through one.
            os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        self._sync_dir(dir_fd)

    # -- the contract ----------------------------------------------------------------
    def put_bytes(self, name: str, data: bytes) -> None:
        self._put(name, bytes(data))

    def put_file(self, name: str, path: Path) -> None:
        validate_name(name)
        self._put(name, local_file(path))

    def _put(self, name: str, data: bytes | Path) -> None:
        def write(fd: int, leaf: str) -> None:
            check_not_link(fd, leaf, name, self.url)
            self._replace_with(fd, leaf, data)

        with self._os_errors("writing", name):
            self._in_parent(name, write)

    def add_if_new(self, name: str, data: bytes | Path, *, link: bool = False) -> bool:
        validate_name(name)
        data = as_bytes_or_path(data)
        with self._os_errors("adding", name):
            return self._in_parent(name, lambda fd, leaf: self._add(name, data, link, fd, leaf))

    def _add(self, name: str, data: bytes | Path, link: bool, fd: int, leaf: str) -> bool:
        """add_if_new in the directory *fd*, as *leaf*."""
        if check_not_link(fd, leaf, name, self.url) is not None:
            return False  # skip the copy; link() below settles races
        if link and self.hardlinks and isinstance(data, Path):
            linked = self._link_immutable(data, fd, leaf)
            if linked is not None:
                return linked
        tmp = self._write_temp(fd, leaf, data)
        try:
            try:
                os.link(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_LINK_ERRNOS:
                    raise
                # No hard links here: check-then-rename. Two racing writers
                # may both report True, but both wrote the same immutable
                # content and readers still never see a partial file.
                if check_not_link(fd, leaf, name, self.url) is not None:
                    return False
                os.replace(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
            self._sync_dir(fd)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)

    def _link_immutable(self, src: Path, dir_fd: int, leaf: str) -> bool | None:
        """Hard-link *src*, a file that never changes, as *leaf* of *dir_fd*.

        True if linked, False if *leaf* exists already, None where this file
        system cannot link *src* there (another device, no hard links, not the
        owner under ``fs.protected_hardlinks``): the caller copies instead. The
        file's bytes are as durable as the store made them; the new name is
        made durable with its directory.
        """
        try:
            os.link(src, leaf, dst_dir_fd=dir_fd)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno == errno.EXDEV or exc.errno in _NO_LINK_ERRNOS:
                return None
            raise
        self._sync_dir(dir_fd)
        return True

    @contextlib.contextmanager
    def _reading(self, name: str) -> Iterator[int]:
        """A descriptor of the regular file *name*, opened without following a link.

        Raises:
            NotFoundOnRemote: *name* (or a directory above it) is missing, or is a directory.
            UnsafeRemotePath: a link (or a special file) on the way or at *name*.
        """
        try:
            with self._parent(name, create=False) as (dir_fd, leaf):
                fd = open_file(dir_fd, leaf, name, self.url)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundOnRemote(name, self.url) from None
        try:
            yield fd
        finally:
            os.close(fd)

    def get_bytes(self, name: str) -> bytes:
        validate_name(name)
        with self._os_errors("reading", name), self._reading(name) as fd:
            return _read_all(fd)

    def get_bytes_at_most(self, name: str, limit: int) -> bytes:
        validate_name(name)
        with self._os_errors("reading", name), self._reading(name) as fd:
            size = os.fstat(fd).st_size
            if size > limit:
                raise RemoteObjectTooLarge(name, self.url, size, limit)
            data = _read_all(fd, limit + 1)  # the file may grow after fstat
        if len(data) > limit:
            raise RemoteObjectTooLarge(name, self.url, len(data), limit)
        return data

    def get_file(self, name: str, dest: Path) -> None:
        validate_name(name)
        dest = Path(dest)
        with self._os_errors("downloading", name), self._reading(name) as src:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(temp_name(dest.name))
            try:
                fd = os.open(tmp, CREATE_FLAGS, 0o666)
                try:
                    copy_fd(src, fd, os.fstat(src).st_size)
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def stat(self, name: str) -> int | None:
        validate_name(name)
        with self._os_errors("inspecting", name):
            try:
                with self._parent(name, create=False) as (dir_fd, leaf):
                    st = check_not_link(dir_fd, leaf, name, self.url)
            except (FileNotFoundError, NotADirectoryError):
                return None
            return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        with self._os_errors("listing", prefix or "/"):
            self._check_root()
        # Walk only the directory the prefix names ("objects/ab" -> objects/).
        start = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        return self._walk(start, prefix)

    def scan(self, prefix: str = "") -> Iterator[Listed]:
        for name in self.list(prefix):
            with self._os_errors("inspecting", name):
                try:
                    with self._parent(name, create=False) as (dir_fd, leaf):
                        st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted since it was listed
            if stat.S_ISREG(st.st_mode):
                # ctime too: a pushed object may be a hard link to an old store file,
                # and linking it changes its ctime only.
                yield Listed(name, st.st_size, max(st.st_mtime, st.st_ctime))
            else:
                yield Listed(name)  # a link: listed (reading it names it), never followed

    def _open_dir(self, rel: str) -> int:
        """A descriptor of directory *rel* ("" for the root), walked without links."""
        fd = open_root(self.root)
        done = ""
        for part in rel.split("/") if rel else ():
            done = f"{done}/{part}" if done else part
            try:
                child = open_subdir(fd, part, done, self.url, create=False)
            finally:
                os.close(fd)
            fd = child
        return fd

    def _walk(self, start: str, prefix: str) -> Iterator[str]:
        """Names under *start* that begin with *prefix*.

        Symbolic links are never followed: one is listed as a name, so that
        reading it raises :class:`UnsafeRemotePath` naming it (a pull reports
        it) rather than being silently skipped. The walk's start must not be
        a link (also :class:`UnsafeRemotePath`).
        """
        stack = [start]
        while stack:
            rel_dir = stack.pop()
            try:
                fd = self._open_dir(rel_dir)
            except (FileNotFoundError, NotADirectoryError):
                continue  # absent, or removed while we walked
            except RemoteError:
                raise
            except OSError as exc:
                raise self._translate(exc, "listing", rel_dir or "/") from exc
            try:
                with os.scandir(fd) as it:
                    found = [
                        (e.name, e.is_dir(follow_symlinks=False), e.is_symlink(), e.is_file())
                        for e in it
                    ]
            except OSError as exc:
                raise self._translate(exc, "listing", rel_dir or "/") from exc
            finally:
                os.close(fd)
            for entry_name, is_dir, is_link, is_file in found:
                if is_reserved(entry_name) or "\\" in entry_name:
                    continue
                rel = f"{rel_dir}/{entry_name}" if rel_dir else entry_name
                if is_dir:
                    # Descend only where names can still match the prefix.
                    if prefix.startswith(rel + "/") or rel.startswith(prefix):
                        stack.append(rel)
                elif (is_link or is_file) and rel.startswith(prefix):
                    yield rel

    def delete(self, name: str) -> None:
        validate_name(name)
        with self._os_errors("deleting", name):
            try:
                with self._parent(name, create=False) as (dir_fd, leaf):
                    # unlink() removes a link itself, never what it points to.
                    self._unlink_file(dir_fd, leaf)
            except (FileNotFoundError, NotADirectoryError):
                return

    def remove_empty_dirs(self, prefix: str) -> int:
        """Remove the empty directories below the directory *prefix* (not it); their count.

        A directory is removed only while it is empty (``rmdir`` refuses any
        other), deepest first, so one emptied by removing its own empty
        children goes too, and a name written meanwhile is never lost; a
        writer that walked into a directory just before it went walks again
        (:meth:`_in_parent`). Links are never followed, nor removed.
        """
        validate_prefix(prefix)
        start = prefix.rstrip("/")
        found: list[str] = []
        stack = [start]
        with self._os_errors("cleaning", prefix or "/"):
            self._check_root()
            while stack:
                rel = stack.pop()
                try:
                    fd = self._open_dir(rel)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # absent, or removed while we walked
                try:
                    with os.scandir(fd) as it:
                        subdirs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
                finally:
                    os.close(fd)
                for part in subdirs:
                    if not is_reserved(part):
                        child = f"{rel}/{part}" if rel else part
                        found.append(child)
                        stack.append(child)
            removed = 0
            for rel in sorted(found, key=lambda r: r.count("/"), reverse=True):
                parent, _, leaf = rel.rpartition("/")
                try:
                    fd = self._open_dir(parent)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                try:
                    os.rmdir(leaf, dir_fd=fd)
                except OSError as exc:
                    # Written to meanwhile, gone already, or a link put in its place.
                    if exc.errno not in _NOT_REMOVED_ERRNOS:
                        raise
                else:
                    removed += 1
                finally:
                    os.close(fd)
        return removed

    @staticmethod
    def _unlink_file(dir_fd: int, leaf: str) -> None:
        st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return  # a directory is not a name
        os.unlink(leaf, dir_fd=dir_fd)

    def set_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        validate_name(name)
        new = bytes(new)
        with self._os_errors("updating", name):
            return self._in_parent(name, lambda fd, leaf: self._swap(name, old, new, fd, leaf))

    def _swap(self, name: str, old: bytes | None, new: bytes, fd: int, leaf: str) -> bool:
        """set_if_equals in the directory *fd*, as *leaf*."""
        check_not_link(fd, leaf, name, self.url)
        # The new content first, beside the name: it also keeps the directory from
        # being removed as empty (gc) while the lock below is taken in it, where a
        # vanished directory would keep the lock's creator retrying.
        tmp = self._write_temp(fd, leaf, new)
        try:
            with self._ref_locked(name, fd, leaf, "update", _compare_limit(old)) as current:
                if current != old:
                    return False
                # A temporary file of our own, not LockFile.commit(): the lock file
                # keeps holding only its holder's record, which waiters parse.
                # rename() replaces a link at *leaf* itself; it never writes through one.
                os.replace(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
                self._sync_dir(fd)
                return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)

    def delete_if_equals(self, name: str, old: bytes) -> bool:
        validate_name(name)
        with self._os_errors("deleting", name):
            try:
                with self._parent(name, create=False) as (fd, leaf):
                    return self._delete_if(name, bytes(old), fd, leaf)
            except (FileNotFoundError, NotADirectoryError):
                return False  # no directory, so no ref

    def _delete_if(self, name: str, old: bytes, fd: int, leaf: str) -> bool:
        """delete_if_equals in the directory *fd*, as *leaf*: under the lock
        set_if_equals takes, so that of a swap and a deletion only one wins."""
        check_not_link(fd, leaf, name, self.url)
        # An empty file of ours keeps the directory while the lock is taken (as in _swap).
        keep = self._write_temp(fd, leaf, b"")
        try:
            with self._ref_locked(name, fd, leaf, "delete", _compare_limit(old)) as current:
                if current != old:
                    return False
                os.unlink(leaf, dir_fd=fd)
                self._sync_dir(fd)
                return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(keep, dir_fd=fd)

    @contextlib.contextmanager
    def _ref_locked(
        self, name: str, fd: int, leaf: str, action: str, limit: int
    ) -> Iterator[bytes | None]:
        """Hold the lock of ref *leaf* in directory *fd*; yield its content then (None
        when it does not exist), at most ``limit + 1`` bytes of it: enough to compare
        it with content *limit* bytes long, never a whole planted file. Only writers
        holding the lock change the file."""
        # The lock protocol takes paths: one through the descriptor, so that a link
        # swapped in above the ref cannot move the lock (or the ref) elsewhere.
        through_fd = proc_path(fd, leaf)
        lock_path = Path(through_fd) if through_fd else self._path(name)
        lock = LockFile(lock_path, timeout=self.lock_timeout, stale_after=self.lock_stale_after)
        try:
            lock.acquire()
        except LockTimeout as exc:
            raise RemoteError(
                f"cannot {action} {name} on {self.url}: timed out waiting for its lock "
                f"({self._path(name)}.lock) held by {exc.holder}; if that process is gone, "
                "remove the lock file"
            ) from exc
        try:
            try:
                rfd = open_file(fd, leaf, name, self.url)
            except FileNotFoundError:
                current: bytes | None = None
            else:
                try:
                    current = _read_all(rfd, limit + 1)
                finally:
                    os.close(rfd)
            yield current
        finally:
            lock.release()


def _read_all(fd: int, limit: int | None = None) -> bytes:
    """The file's bytes from the current offset; at most *limit* of them, if given."""
    chunks = []
    left = limit
    while left is None or left > 0:
        chunk = os.read(fd, _READ_CHUNK if left is None else min(_READ_CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        if left is not None:
            left -= len(chunk)
    return b"".join(chunks)


def _compare_limit(old: bytes | None) -> int:
    """How many bytes of a file must be read to compare it with *old*."""
    return 0 if old is None else len(old)
