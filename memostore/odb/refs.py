"""Refs: small named pointers to objects, updated by compare-and-swap.

A ref file holds one object id and a newline. Ref names are ``/``-separated
paths whose parts are made of ``[A-Za-z0-9._-]`` (see :func:`ref_part` to
escape anything else, such as a function's qualified name). This module never
touches the object database.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import MemostoreError, RefError
from .inside import CheckedDirs, make_dirs_beneath, refusal
from .lockfile import Flush, LockFile
from .objects import is_object_id

# Matched with fullmatch: "$" would also accept a part ending in a newline.
_PART_RE = re.compile(r"[A-Za-z0-9._%-]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class ForeignRefFile(RefError):
    """A file under ``refs/`` that no ref writer makes (a symbolic link, a FIFO, ...)."""


class LinkedRefDir(ForeignRefFile):
    """A ref lies under a directory of ``refs/`` that is a symbolic link: never read."""


def ref_part(text: str) -> str:
    """Escape *text* into one ref-name component (percent-encoding, reversible)."""
    escaped = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)
    # A leading dot (hidden/temp files on remotes) and a ".lock" suffix are reserved.
    if escaped.startswith(".") or escaped.endswith(".lock") or ".lock." in escaped:
        escaped = escaped.replace(".", "%2E")
    return escaped


def unescape_ref_part(part: str) -> str:
    """Undo :func:`ref_part`."""
    out = bytearray()
    i = 0
    while i < len(part):
        if part[i] == "%" and i + 2 < len(part) + 1:
            out.append(int(part[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(part[i].encode())
            i += 1
    return out.decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=8192)
def check_ref_name(name: str) -> None:
    """Refuse names that could escape the refs directory or collide with lock files."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or any(
            not p or p.startswith(".") or not _PART_RE.fullmatch(p) or _is_lock_file(p)
            for p in parts
        )
    ):
        raise RefError(f"invalid ref name {name!r}")


def _is_lock_file(filename: str) -> bool:
    """Lock files and their companions (``NAME.lock``, ``NAME.lock.new``, ``NAME.lock.stale-*``)
    and hidden temp files (a leading dot, as remote writers use), none of them a ref."""
    return filename.startswith(".") or filename.endswith(".lock") or ".lock." in filename


def _parse_ref_content(name: str, data: bytes) -> str:
    text = data.decode("ascii", errors="replace").strip()
    if not is_object_id(text):
        raise RefError(f"ref {name} is damaged (holds {text[:80]!r}); run `memostore fsck`")
    return text


class BaseRefContainer(ABC):
    """The contract every ref container keeps."""

    @abstractmethod
    def read(self, name: str) -> str | None:
        """The id a ref points to, or None when it does not exist."""

    @abstractmethod
    def set_if_equals(self, name: str, old: str | None, new: str) -> bool:
        """Point *name* at *new* only if it currently points at *old* (None: absent).

        Returns False, changing nothing, when the current value differs.
        """

    @abstractmethod
    def set(self, name: str, new: str, *, flush: Flush | None = None) -> str | None:
        """Point *name* at *new* whatever it held; return the previous value.

        On disk, *flush* makes the new content durable before it replaces the
        ref (given the descriptor it is written to; default: an fsync of it).
        """

    @abstractmethod
    def delete_if_equals(self, name: str, old: str | None) -> bool:
        """Delete *name* if it points at *old* (None: whatever it holds)."""

    @abstractmethod
    def iter(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        """(name, id) for every ref whose name starts with *prefix*."""

    def names(self, prefix: str = "") -> list[str]:
        return sorted(name for name, _ in self.iter(prefix))


class MemoryRefContainer(BaseRefContainer):
    """The in-memory twin of :class:`DiskRefContainer`."""

    def __init__(self) -> None:
        self._refs: dict[str, str] = {}
        self._lock = threading.Lock()

    def read(self, name: str) -> str | None:
        check_ref_name(name)
        return self._refs.get(name)

    def set_if_equals(self, name: str, old: str | None, new: str) -> bool:
        check_ref_name(name)
        if not is_object_id(new):
            raise RefError(f"not an object id: {new!r}")
        with self._lock:
            if self._refs.get(name) != old:
                return False
            self._refs[name] = new
            return True

    def set(self, name: str, new: str, *, flush: Flush | None = None) -> str | None:
        check_ref_name(name)
        if not is_object_id(new):
            raise RefError(f"not an object id: {new!r}")
        with self._lock:
            previous = self._refs.get(name)
            self._refs[name] = new
            return previous

    def delete_if_equals(self, name: str, old: str | None) -> bool:
        check_ref_name(name)
        with self._lock:
            if name not in self._refs or (old is not None and self._refs[name] != old):
                return False
            del self._refs[name]
            return True

    def iter(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        with self._lock:
            items = list(self._refs.items())
        for name, value in items:
            if name.startswith(prefix):
                yield name, value


class DiskRefContainer(BaseRefContainer):
    """One file per ref under ``refs/``; updates go through a lock file."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.refs_dir = self.root / "refs"
        self._refs_dir_str = str(self.refs_dir)
        self._dirs = CheckedDirs(str(self.root))

    def path_of(self, name: str) -> Path:
        check_ref_name(name)
        return self.refs_dir / name

    def read(self, name: str) -> str | None:
        check_ref_name(name)
        self._refuse_linked_dirs(name)
        data = _read_ref_file(os.path.join(self._refs_dir_str, name), name)
        return None if data is None else _parse_ref_content(name, data)

    def _dir_of(self, name: str) -> str:
        parent = name.rpartition("/")[0]
        return f"refs/{parent}" if parent else "refs"

    def _refuse_linked_dirs(self, name: str) -> None:
        """Raise LinkedRefDir if a directory on the way to ref *name* is a link.

        Once per directory and process (a set lookup after that): a hit reads a ref.
        """
        link = self._dirs.link_on_way(self._dir_of(name))
        if link is not None:
            raise LinkedRefDir(f"ref {name} cannot be read: " + refusal(link))

    def _read_for_update(self, name: str) -> str | None:
        try:
            return self.read(name)
        except RefError:
            return None  # a damaged ref may always be overwritten

    def set_if_equals(self, name: str, old: str | None, new: str) -> bool:
        swapped, _ = self._update(name, new, lambda current: current == old)
        return swapped

    def set(self, name: str, new: str, *, flush: Flush | None = None) -> str | None:
        _, previous = self._update(name, new, lambda current: True, flush)
        return previous

    def _update(
        self,
        name: str,
        new: str,
        accept: Callable[[str | None], bool],
        flush: Flush | None = None,
    ) -> tuple[bool, str | None]:
        """Under the ref's lock: if *accept* (current value) holds, write *new*.

        Returns whether it was written and the value it replaced (or kept).
        """
        if not is_object_id(new):
            raise RefError(f"not an object id: {new!r}")
        path = self.path_of(name)
        # Made beneath the store's root, never through a link planted in refs/.
        try:
            make_dirs_beneath(str(self.root), self._dir_of(name))
        except MemostoreError as exc:
            raise LinkedRefDir(f"ref {name} cannot be written: {exc}") from None
        lock = LockFile(path)
        lock.acquire()
        try:
            # Read again while holding the lock: the value seen before may be gone.
            current = self._read_for_update(name)
            if not accept(current):
                lock.release()
                return False, current
            lock.commit(new.encode("ascii") + b"\n", flush)
        except BaseException:
            lock.release()
            raise
        return True, current

    def delete_if_equals(self, name: str, old: str | None) -> bool:
        return self._delete_if_equals(name, old)

    def delete_many_if_equals(self, pairs: Iterable[tuple[str, str | None]]) -> int:
        """Delete each ref (name, old) of *pairs* that still holds *old*; how many went.

        For eviction, which deletes thousands of refs in a row. Each deletion
        takes no lock (a lock costs two more changes of the ref's directory,
        the most expensive thing a deletion does); it moves the ref aside
        instead (:func:`_delete_moved_aside`), which keeps these guarantees
        against a writer re-pointing the ref at the same time:

        - no value but *old* is ever deleted, and the writer's value stays;
        - a writer's update is never lost (unlike :meth:`delete_if_equals`,
          both may report success: the deletion took *old*, then the writer
          wrote its value);
        - for a few microseconds, and only when a writer re-pointed the ref
          between the deletion's read and its rename, a reader finds no ref
          (a miss, never a wrong value).

        A name that is no regular file (a link, a directory) is left alone.
        """
        work = []
        for name, old in pairs:
            check_ref_name(name)
            self._refuse_linked_dirs(name)
            work.append((f"{self._refs_dir_str}/{name}", name, old))
        # The lock-file form keeps the name out of every listing of refs, and the
        # sweep of lock leftovers removes one left by a deleter killed midway.
        aside = f".lock.gone-{os.getpid()}-{threading.get_ident()}"
        # No Python between these system calls that need not be there: eviction
        # runs this on several threads, which share one interpreter lock.
        return sum([_delete_moved_aside(path, name, old, path + aside) for path, name, old in work])

    def _delete_if_equals(self, name: str, old: str | None) -> bool:
        check_ref_name(name)
        self._refuse_linked_dirs(name)
        path = os.path.join(self._refs_dir_str, name)
        if not os.path.lexists(path):
            return False
        with LockFile(path):
            # Read again while holding the lock: a writer may have re-pointed it.
            try:
                data = _read_ref_file(path, name)
                current = None if data is None else _parse_ref_content(name, data)
            except RefError:
                current = None  # a damaged ref may always be overwritten (or deleted)
                data = b""
            if data is None:
                return False  # deleted meanwhile
            if old is not None and current != old:
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return True

    def iter(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        # Walk only the directory the prefix names, so listing one function's
        # evaluations does not scan the whole store.
        base_rel = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        if base_rel and not all(_is_ref_part(p) for p in base_rel.split("/")):
            return  # no valid ref name starts with this prefix
        if self._dirs.link_on_way(f"refs/{base_rel}" if base_rel else "refs") is not None:
            return  # never listed through a link (fsck names it)
        base = f"{self._refs_dir_str}/{base_rel}" if base_rel else self._refs_dir_str
        yield from _iter_ref_dir(base, f"{base_rel}/" if base_rel else "", prefix)

    def list_checked(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """Every ref in one pass: ((name, id) of the readable ones, (name, reason)
        of those whose content is damaged or cannot be read).

        The refs are those :meth:`iter` lists; the damaged ones those
        ``iter_damaged(foreign=False)`` names (files no ref writer makes are in
        neither list). gc reads the refs this way, once per pass.
        """
        damaged: list[tuple[str, str]] = []
        if self._dirs.link_on_way("refs") is not None:
            return [], damaged  # never listed through a link (fsck names it)
        refs = list(_iter_ref_dir(self._refs_dir_str, "", "", damaged))
        return refs, damaged

    def iter_damaged(self, foreign: bool = True) -> Iterator[tuple[str, str]]:
        """(name, reason) for each file under ``refs/`` that is not a readable ref (for fsck).

        With *foreign* False, only refs whose content is damaged: files that no
        writer of refs could have made (an invalid name, a symbolic link, not a
        regular file) are never read as refs, so they keep nothing (gc skips them).
        """
        if not self.refs_dir.is_dir() or self.refs_dir.is_symlink():
            return  # fsck reports a linked refs/ itself
        for name, path in self._ref_files(self.refs_dir):
            try:
                check_ref_name(name)
            except RefError:
                if foreign:
                    yield name, f"invalid ref name {name!r}: not a ref; rename or delete {path}"
                continue
            try:
                data = _read_ref_file(path, name)
                if data is not None:
                    _parse_ref_content(name, data)
            except RefError as exc:
                if foreign or not isinstance(exc, ForeignRefFile):
                    yield name, str(exc)
            except OSError as exc:
                yield name, f"ref {name} cannot be read ({exc.strerror or exc}); check {path}"

    def _ref_files(self, base: Path) -> Iterator[tuple[str, str]]:
        """(name, path) of every file under *base* but lock files and temporaries."""
        for dirpath, _dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.refs_dir)
            for filename in filenames:
                if _is_lock_file(filename):
                    continue
                name = filename if rel_dir == "." else f"{rel_dir}/{filename}"
                yield name.replace(os.sep, "/"), os.path.join(dirpath, filename)


# A ref file is 65 bytes; reading more of a file there is pointless.
_REF_READ_MAX = 4096
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _is_ref_part(part: str) -> bool:
    """Whether *part* may be one component of a ref name (as :func:`check_ref_name`)."""
    return (
        not part.startswith(".")
        and _PART_RE.fullmatch(part) is not None
        and not _is_lock_file(part)
    )


def _iter_ref_dir(
    path: str, rel: str, prefix: str, damaged: list[tuple[str, str]] | None = None
) -> Iterator[tuple[str, str]]:
    """(name, id) of the readable refs under directory *path* (named *rel*), as
    :meth:`DiskRefContainer.iter` lists them: a directory's files first, then each
    subdirectory in turn; links, non-regular files, invalid names and damaged refs
    skipped. With a *damaged* list, each ref whose content is damaged or cannot be
    read is appended to it as (name, reason), as ``iter_damaged(foreign=False)``
    names it.

    One ``scandir`` per directory and one open and read per ref: the kind of each
    entry comes from the directory listing, each name part is checked once.
    """
    try:
        with os.scandir(path) as listing:
            entries = list(listing)
    except OSError:
        return  # unreadable or gone meanwhile: as os.walk, skipped
    subdirs = []
    for entry in entries:
        filename = entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry)
                continue
            if not entry.is_file(follow_symlinks=False):
                continue  # a link, a FIFO, ...: never a ref (fsck names it)
        except OSError:
            continue
        name = rel + filename
        if not name.startswith(prefix) or not _is_ref_part(filename):
            continue  # lock files and temporaries are invalid parts too
        try:
            fd = os.open(entry.path, _READ_FLAGS)
        except OSError as exc:
            if damaged is not None and exc.errno not in _GONE_OR_FOREIGN:
                damaged.append((name, _unreadable(name, entry.path, exc)))
            continue  # deleted meanwhile, or replaced by a link
        try:
            # A regular file when listed; one replaced since by a directory fails
            # the read, by a FIFO reads empty: either way no ref, as before.
            data = os.read(fd, _REF_READ_MAX)
        except OSError as exc:
            if damaged is not None and exc.errno != errno.EISDIR:
                damaged.append((name, _unreadable(name, entry.path, exc)))
            continue
        finally:
            os.close(fd)
        try:
            target = _parse_ref_content(name, data)
        except RefError as exc:
            if damaged is not None:
                damaged.append((name, str(exc)))
            continue
        yield name, target
    for entry in subdirs:
        sub = rel + entry.name + "/"
        if not _is_ref_part(entry.name):
            continue  # every name below would be invalid
        if not (sub.startswith(prefix) or prefix.startswith(sub)):
            continue  # no name below can start with the prefix
        yield from _iter_ref_dir(entry.path, sub, prefix, damaged)


# open() errors of a ref file that was deleted, or replaced by a link or a
# directory, since it was listed: no ref there, as iter_damaged sees it.
_GONE_OR_FOREIGN = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def _unreadable(name: str, path: str, exc: OSError) -> str:
    return f"ref {name} cannot be read ({exc.strerror or exc}); check {path}"


def _read_ref_file(path: str, name: str) -> bytes | None:
    """The bytes of the ref file at *path*, or None where there is none.

    Never follows a symbolic link at the ref's name, nor blocks on a FIFO there.

    Raises:
        ForeignRefFile: the name holds something other than a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ForeignRefFile(
                f"ref {name} is a symbolic link ({path}), which memostore never follows: "
                "run `memostore fsck` to list such files, then delete it"
            ) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None  # a directory of refs, not a ref
        if not stat.S_ISREG(mode):
            raise ForeignRefFile(f"ref {name} is not a regular file; delete {path}")
        return os.read(fd, _REF_READ_MAX)
    finally:
        os.close(fd)


def _delete_moved_aside(path: str, name: str, old: str | None, aside: str) -> bool:
    """Delete the ref file at *path* if it holds *old* (any value if None), without a lock.

    The ref is read, then renamed to *aside* and unlinked there. The rename is
    what deletes it: atomic, and it takes whatever file is at *path* then. The
    file read stays open until after the rename, so its inode number cannot be
    reused meanwhile: the file moved aside is the one read exactly when the
    numbers match. If they do not, a writer put a new value in between; it is
    linked back, unless a newer one is there already.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # gone, or a link (never followed, never deleted here)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if old is not None:
            try:
                if _parse_ref_content(name, os.read(fd, _REF_READ_MAX)) != old:
                    return False
            except RefError:
                return False  # damaged: it holds no *old*
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False  # another deleter took it first
        try:
            moved = os.lstat(aside)
        except FileNotFoundError:
            return True  # swept already as a leftover: gone all the same
        if moved.st_ino == st.st_ino and moved.st_dev == st.st_dev:
            os.unlink(aside)
            return True
        _put_back(aside, path)
        return False
    finally:
        os.close(fd)


def _put_back(aside: str, path: str) -> None:
    """Return a ref moved aside to *path*, unless a newer one is there now."""
    try:
        os.link(aside, path)
    except FileExistsError:
        pass  # written again since: the newer value stays
    except OSError:
        # No hard links on this file system: a rename, which could replace a ref
        # written in the last instant; only if none is there.
        if not os.path.lexists(path):
            os.rename(aside, path)
            return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(aside)
