"""The store's own directories are never entered through a symbolic link.

A store is shared by everyone who can write to it, and a link planted in it
(``objects/ab`` -> ``~victim/.ssh``, ``refs/evals/train`` -> ``/etc``) would
make memostore read, write, touch or delete files elsewhere. So:

- every directory on the way to an object or a ref is checked with ``lstat``
  before it is used; a link there is refused (:class:`LinkedStorePath`), and
  ``memostore fsck`` lists every link in the store (:func:`links_in`);
- directories are made beneath the store's root one component at a time,
  through descriptors (``openat``, as for a directory remote:
  ``odb/beneath.py``), so a write never follows a link either.

A hit reads a ref and a few objects, so the check of a directory is made once
per process (:class:`CheckedDirs`): later reads cost a set lookup. A
directory replaced by a link while a process runs is therefore caught by the
next process, and by fsck; a file-level link is refused on every read
(``O_NOFOLLOW``).

Paths that a stored record names (an export's run directories, a snapshot's
files) are joined under their root by :func:`join_beneath`, the one place that
checks where such a path ends up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from ..errors import MemostoreError


class LinkedStorePath(MemostoreError):
    """A path inside the store is a symbolic link: memostore never follows it.

    Attributes:
        path: the link (a full path).
    """

    def __init__(self, path: str, message: str = "") -> None:
        self.path = path
        super().__init__(message or refusal(path))


class OutsideRoot(MemostoreError, ValueError):
    """A path built from stored names would end outside the directory it belongs in.

    Attributes:
        root: the directory.
        name: the relative path the record named.
        final: where it would have ended.
    """

    def __init__(self, root: str, name: str, final: str) -> None:
        self.root, self.name, self.final = root, name, final
        super().__init__(
            f"refused to use {name!r} under {root}: it ends at {final}, not below it "
            "(stored names can come from whoever wrote a pulled store); nothing was written "
            "there: check where the record came from (`memostore show`)"
        )


def join_beneath(root: str | os.PathLike[str], name: str) -> Path:
    """*root*/*name*, where *name* is a relative path that a stored record chose.

    The check is made on the final path, after every transformation a name
    went through before it got here (sanitising, stripping, percent-encoding)
    and that the file system applies (``..``, the symbolic links of the
    parents that exist): the resolved path must lie strictly below the
    resolved root. A check of the name's parts alone misses what a later
    transformation makes of them (``_.._`` stripped of its ``_`` is ``..``).
    A link planted after the check is outside this: writes below a checkout go
    through directory descriptors for that (:mod:`.checkouts`).

    Raises:
        OutsideRoot: the path would be the root itself or outside it.
    """
    base = os.path.realpath(root)
    final = os.path.realpath(os.path.join(base, name))
    if final == base or os.path.commonpath([base, final]) != base:
        raise OutsideRoot(os.fspath(root), name, final)
    return Path(root) / name


def refusal(path: str, what: str = "") -> str:
    """The one-line message for a link met at *path* (*what*: what lay behind it)."""
    behind = f" ({what} lies behind it)" if what else ""
    return (
        f"{path} is a symbolic link inside the store{behind}; memostore never follows links "
        "there (one could point anywhere): run `memostore fsck` to list them, then replace "
        "each with a plain directory or file and check who made it"
    )


def first_link(root: str, parts: Sequence[str]) -> tuple[str | None, bool]:
    """(the first of *root*/*parts*... that is a link, whether every part exists).

    Stops at the first part that is missing: nothing below it can be a link yet.
    """
    path = root
    for part in parts:
        path = f"{path}/{part}"
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None, False
        if stat.S_ISLNK(mode):
            return path, True
    return None, True


class CheckedDirs:
    """Directories below one root found to be no link, remembered for the process."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._ok: set[str] = set()
        self._lock = threading.Lock()

    def link_on_way(self, rel_dir: str) -> str | None:
        """The link among the directories of *rel_dir* ("refs/evals/f"), or None.

        A directory path found whole and link-free is remembered; a missing one
        is checked again next time (it may be made, or planted, meanwhile).
        """
        if rel_dir in self._ok:
            return None
        link, whole = first_link(self.root, rel_dir.split("/"))
        if link is None and whole:
            with self._lock:
                self._ok.add(rel_dir)
        return link

    def forget(self) -> None:
        with self._lock:
            self._ok.clear()


def is_own_file(path: str) -> bool:
    """Whether *path* is a regular file (not a link to one: that is never used)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def open_own_file(path: str) -> BinaryIO:
    """*path* opened for reading: never through a link at its name, nor blocking on a FIFO.

    Raises:
        LinkedStorePath: *path* is a symbolic link.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkedStorePath(path) from None
        raise
    return open(fd, "rb")


def make_dirs_beneath(root: str, rel_dir: str) -> None:
    """Make *rel_dir* below *root* (and its parents), never through a link.

    Raises:
        LinkedStorePath: a directory on the way is a symbolic link (or a file).
    """
    # Imported here: the transports package costs its import to every process, and
    # only a write reaches this.
    from .beneath import UnsafeRemotePath, open_parent

    parts = [p for p in rel_dir.split("/") if p]
    # The root itself may be a link (a store on another disk): it is made as given.
    os.makedirs(root, exist_ok=True)
    try:
        fd = open_parent(root, [*parts, "."], root, create=True)
    except UnsafeRemotePath as exc:
        raise LinkedStorePath(os.path.join(root, exc.name)) from None
    os.close(fd)


def links_in(root: str, rel_dirs: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(path, target) of every symbolic link in the trees *rel_dirs* of *root* (fsck).

    Walks without following links: a linked directory is listed, never entered.
    """
    for rel in rel_dirs:
        top = os.path.join(root, rel)
        if os.path.islink(top):
            yield top, _target(top)
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (*dirnames, *filenames):
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    yield path, _target(path)


def _target(path: str) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(path)
    return "?"
