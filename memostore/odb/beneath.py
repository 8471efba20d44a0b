"""Opening paths beneath a directory without following symbolic links.

A directory remote is shared: anyone who can write to it can plant a symbolic
link (``refs/`` -> ``~victim/.ssh``, ``objects/ab`` -> ``/etc``) and wait for
someone's push to write through it, or someone's pull to read through it.
Every path inside a remote is therefore walked one component at a time from
a descriptor of the remote's root, each component opened with
``O_NOFOLLOW`` relative to its parent's descriptor (``openat``), and every
final operation (``open``, ``rename``, ``link``, ``unlink``, ``stat``) is made
relative to the parent directory's descriptor, so a link met anywhere below
the root is refused (:class:`UnsafeRemotePath`), never followed, and a link
swapped in after a check cannot redirect the operation. The root itself is
what the user configured and may be a link (``/shared`` -> ``/mnt/nfs``).

Linux's ``openat2(RESOLVE_BENEATH)`` would do the walk in one call; Python has
no binding for it, and the walk works on every POSIX system.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence

from ..errors import RemoteError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Reading a file: never through a link at its name, never blocking on a FIFO there.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Creating a temporary file: a new file of our own or nothing.
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeRemotePath(RemoteError):
    """A path inside a remote is a symbolic link or another thing never followed.

    Attributes:
        name: the path inside the remote (``refs/evals``).
        url: the remote's URL.
    """

    def __init__(self, name: str, url: str, what: str = "a symbolic link") -> None:
        self.name = name
        self.url = url
        super().__init__(
            f"{name} on remote {url} is {what}; memostore never follows links inside a "
            "remote (one could point anywhere): replace it with a plain directory or file, "
            "and check who made it"
        )


def is_link(dir_fd: int, name: str) -> bool:
    """True when *name* in *dir_fd* is a symbolic link."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_root(root: str | os.PathLike[str]) -> int:
    """A descriptor of the remote's root directory (following links: it is configured)."""
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_subdir(dir_fd: int, part: str, where: str, url: str, *, create: bool) -> int:
    """Open directory *part* of *dir_fd* (making it when *create*), never through a link.

    Args:
        dir_fd: the parent directory.
        part: one path component.
        where: its path inside the remote, for messages.
        url: the remote's URL, for messages.
        create: make the directory when it is missing.

    Raises:
        UnsafeRemotePath: *part* is a symbolic link (or, with *create*, a file).
        FileNotFoundError: it is missing (without *create*), or not a directory.
    """
    for _ in range(2):
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise
        except NotADirectoryError:
            # O_NOFOLLOW with O_DIRECTORY reports a link as "not a directory".
            if is_link(dir_fd, part):
                raise UnsafeRemotePath(where, url) from None
            if create:
                raise UnsafeRemotePath(where, url, "a file where a directory belongs") from None
            raise FileNotFoundError(errno.ENOENT, "not a directory", where) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeRemotePath(where, url) from None
            raise
        with contextlib.suppress(FileExistsError):  # made by another writer meanwhile
            os.mkdir(part, 0o777, dir_fd=dir_fd)
    raise FileNotFoundError(errno.ENOENT, "removed while it was opened", where)


def open_parent(
    root: str | os.PathLike[str], parts: Sequence[str], url: str, *, create: bool
) -> int:
    """A descriptor of the directory holding ``parts[-1]``, walked from *root*; the
    caller closes it.

    Args:
        root: the remote's root directory.
        parts: the name's components (validated: no ``..``, no empty part).
        url: the remote's URL, for messages.
        create: make missing directories on the way.

    Raises:
        UnsafeRemotePath: a directory on the way is a symbolic link.
        FileNotFoundError: the root, or a directory on the way, is missing
            (without *create*).
    """
    fd = open_root(root)
    try:
        for i, part in enumerate(parts[:-1]):
            child = open_subdir(fd, part, "/".join(parts[: i + 1]), url, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, leaf: str, name: str, url: str) -> int:
    """Open the regular file *leaf* of *dir_fd* for reading, never through a link.

    Raises:
        UnsafeRemotePath: *leaf* is a symbolic link or a special file (a FIFO).
        FileNotFoundError: *leaf* is missing or is a directory.
    """
    try:
        fd = os.open(leaf, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeRemotePath(name, url) from None
        if isinstance(exc, NotADirectoryError):
            raise FileNotFoundError(errno.ENOENT, "not found", name) from None
        raise
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise FileNotFoundError(errno.ENOENT, "a directory, not a file", name)
    raise UnsafeRemotePath(name, url, "not a regular file")


def check_not_link(dir_fd: int, leaf: str, name: str, url: str) -> os.stat_result | None:
    """The stat of *leaf* (None when absent), refusing a symbolic link or special file."""
    try:
        st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRemotePath(name, url)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise UnsafeRemotePath(name, url, "not a regular file")
    return st


def proc_path(dir_fd: int, leaf: str) -> str | None:
    """A path naming *leaf* in *dir_fd* through ``/proc/self/fd`` (Linux), else None.

    For code that takes paths (the lock file protocol): the kernel resolves the
    descriptor itself, so the path cannot be redirected by a link swapped in
    above it.
    """
    base = f"/proc/self/fd/{dir_fd}"
    try:
        if os.path.samestat(os.stat(base), os.fstat(dir_fd)):
            return f"{base}/{leaf}"
    except OSError:
        pass
    return None
