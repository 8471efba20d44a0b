"""Content digests of files and directory trees, reused while a stat proves them unchanged.

A file's digest is the BLAKE3 digest of its bytes: the id its blob has in a
store. Hashing a 400 MB file on every call would cost more than a hit saves,
so each digest is cached per process under the file's identity and its stat
signature (device, inode, size, mtime, ctime), as git's index and DVC's state
database do. A cached digest is reused only while the signature is unchanged
and the entry is not *racy*: a file whose mtime or ctime lies within
:data:`RACY_WINDOW_NS` of the moment its stat was taken could be written again
within the same timestamp tick, leaving the signature as it was (git's "racy
git" problem), so such an entry is never trusted and the file is re-hashed
until its timestamps are older than the window.

A directory's digest covers its tree: the relative names, kinds and file
digests (and executable bits) of everything below it, never its location or
timestamps. The rules:

* symbolic links are followed, inside the tree as at its root; a dangling link
  or a loop of links is refused;
* every directory is recorded, empty ones included;
* anything but a regular file, a directory or a link to one (a named pipe, a
  socket, a device) is refused.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import threading
import time
from dataclasses import dataclass
from stat import S_ISDIR, S_ISREG, S_IXUSR

from ..errors import MemostoreError
from ..odb.objects import digest_bytes, new_hasher

# Mtimes and ctimes this close to the stat that recorded a digest make it untrusted.
# Covers FAT's 2 s mtime (rounded either way), 1 s filesystems and coarse kernel
# clocks, with a margin for small clock differences of network filesystems.
RACY_WINDOW_NS = 3_000_000_000

TREE_PREFIX = b"memostore:tree:1\n"

_READ_CHUNK = 8 << 20
_MMAP_MIN = 4 << 20
_CHANGE_RETRIES = 3


class PathKeyError(MemostoreError, ValueError):
    """A file or directory cannot be keyed by its content (the message says why and how)."""


@dataclass(frozen=True, slots=True)
class ContentDigest:
    """What a file or a directory tree holds, as a digest.

    Attributes:
        kind: ``"file"`` or ``"dir"``.
        digest: the file's BLAKE3 digest, or the digest of the tree's manifest.
        files: how many regular files it holds (1 for a file).
        size: their total size in bytes.
    """

    kind: str
    digest: str
    files: int
    size: int


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileDigestCache:
    """(device, inode) -> digest, valid while the file's stat signature is unchanged.

    Thread-safe. Entries are only added when they are not racy (see the module
    docstring); the cache forgets everything once it holds *max_entries*.
    """

    def __init__(self, max_entries: int = 1 << 18) -> None:
        self._entries: dict[tuple[int, int], tuple[tuple[int, int, int], str]] = {}
        self._max_entries = max_entries
        self._lock = threading.Lock()

    def lookup(self, st: os.stat_result) -> str | None:
        """The digest cached for the file *st* describes, if it still holds."""
        entry = self._entries.get((st.st_dev, st.st_ino))
        if entry is not None and entry[0] == _signature(st):
            return entry[1]
        return None

    def digest(self, path: str, st: os.stat_result | None = None) -> tuple[str, os.stat_result]:
        """The digest of the regular file at *path* and the stat it holds for.

        Args:
            path: the file.
            st: its stat (following links), when the caller has it already.

        Raises:
            PathKeyError: the file keeps changing while it is read.
            OSError: it cannot be opened or read.
        """
        if st is None:
            st = os.stat(path)
        cached = self.lookup(st)
        if cached is not None:
            return cached, st
        for _ in range(_CHANGE_RETRIES):
            # The clock is read before the file: a write after this moment gets a
            # timestamp at or after it, so an entry is racy exactly when the file's
            # timestamps come within the window of it.
            recorded_ns = time.time_ns()
            digest, before, after = _hash_open_file(path)
            if (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino) and _signature(
                before
            ) == _signature(after):
                if max(before.st_mtime_ns, before.st_ctime_ns) < recorded_ns - RACY_WINDOW_NS:
                    self._put(before, digest)
                return digest, before
        raise PathKeyError(
            f"{path} kept changing while it was hashed; key it once whatever writes it has finished"
        )

    def forget(self, st: os.stat_result) -> None:
        with self._lock:
            self._entries.pop((st.st_dev, st.st_ino), None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _put(self, st: os.stat_result, digest: str) -> None:
        with self._lock:
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            self._entries[(st.st_dev, st.st_ino)] = (_signature(st), digest)


def _hash_open_file(path: str) -> tuple[str, os.stat_result, os.stat_result]:
    """BLAKE3 of the file's bytes with its stat before and after the read (same descriptor)."""
    # Non-blocking: if a named pipe took the file's place since its stat, the open
    # must not wait for a writer (the fstat below then refuses it).
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb", buffering=0) as f:
        before = os.fstat(f.fileno())
        if not stat.S_ISREG(before.st_mode):
            raise PathKeyError(f"{path} is {_kind_name(before.st_mode)}: {_ONLY_FILES}")
        size = before.st_size
        hasher = new_hasher(size)
        if size >= _MMAP_MIN:
            # A map lets BLAKE3 hash on every core without copying the bytes.
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                hasher.update(mapped)
        else:
            buf = bytearray(min(max(size, 1), _READ_CHUNK))
            view = memoryview(buf)
            while n := f.readinto(buf):
                hasher.update(view[:n])
        after = os.fstat(f.fileno())
    return hasher.hexdigest(), before, after


file_digests = FileDigestCache()


def content_digest(
    path: str | os.PathLike[str], cache: FileDigestCache = file_digests
) -> ContentDigest:
    """The content digest of a file or a directory tree.

    Raises:
        FileNotFoundError: *path* does not exist (or is a dangling link).
        PathKeyError: it, or something in its tree, cannot be keyed by content.
    """
    text = os.fspath(path)
    st = os.stat(text)
    if stat.S_ISREG(st.st_mode):
        digest, st = cache.digest(text, st)
        return ContentDigest("file", digest, 1, st.st_size)
    if stat.S_ISDIR(st.st_mode):
        return _tree_digest(text, st, cache)
    raise PathKeyError(f"{text} is {_kind_name(st.st_mode)}: {_ONLY_FILES}")


_ONLY_FILES = (
    "only regular files and directories can be keyed by content; pass a file or directory, "
    "or leave the argument out of @memo(files=...)"
)


def _kind_name(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _tree_digest(root: str, root_st: os.stat_result, cache: FileDigestCache) -> ContentDigest:
    """Walk the tree under *root*; digest its sorted manifest (see the module docstring).

    The manifest has one line per entry, ``kind NUL relative-name NUL``, sorted by
    name (as ``os.fsdecode`` gives it), encoded as UTF-8 with ``surrogateescape``
    (so undecodable names keep their bytes). Kinds: ``D`` for a directory;
    ``F`` + ``x`` or ``-`` (executable bit) + `` size digest`` for a file. Names
    cannot hold NUL, so the lines are unambiguous.
    """
    lines: list[tuple[str, str]] = []
    files = size = 0
    lookup = cache.lookup
    # (directory path, its relative path, the (dev, ino) of it and of its ancestors)
    stack: list[tuple[str, str, frozenset[tuple[int, int]]]] = [
        (root, "", frozenset({(root_st.st_dev, root_st.st_ino)}))
    ]
    while stack:
        directory, rel_dir, ancestors = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError as exc:
            raise PathKeyError(f"cannot list {directory} ({exc.strerror})") from exc
        for entry in entries:
            rel = rel_dir + entry.name
            try:
                st = entry.stat()  # follows links
            except OSError as exc:
                raise _entry_error(entry, exc) from None
            mode = st.st_mode
            if S_ISREG(mode):
                digest = lookup(st)
                if digest is None:
                    try:
                        digest, st = cache.digest(entry.path, st)
                    except OSError as exc:
                        raise PathKeyError(f"cannot read {entry.path} ({exc.strerror})") from exc
                    mode = st.st_mode
                flag = "x" if mode & S_IXUSR else "-"
                lines.append((rel, f"F{flag} {st.st_size} {digest}"))
                files += 1
                size += st.st_size
            elif S_ISDIR(mode):
                ident = (st.st_dev, st.st_ino)
                if ident in ancestors:
                    raise PathKeyError(
                        f"{entry.path} links back to a directory above it (a loop): "
                        "remove the link, or key a directory that does not contain it"
                    )
                lines.append((rel, "D"))
                stack.append((entry.path, rel + "/", ancestors | {ident}))
            else:
                raise PathKeyError(f"{entry.path} is {_kind_name(mode)}: {_ONLY_FILES}")
    lines.sort()
    manifest = "".join([f"{kind}\0{rel}\0" for rel, kind in lines])
    data = TREE_PREFIX + manifest.encode("utf-8", "surrogateescape")
    return ContentDigest("dir", digest_bytes(data), files, size)


def _entry_error(entry: os.DirEntry[str], exc: OSError) -> PathKeyError:
    if isinstance(exc, FileNotFoundError):
        return PathKeyError(
            f"{entry.path} is a symbolic link to nothing ({os.readlink(entry.path)!r}): "
            "remove it or make it point at a file"
        )
    if exc.errno == errno.ELOOP:
        return PathKeyError(
            f"{entry.path} is a loop of symbolic links: remove it or make it point at a file"
        )
    return PathKeyError(f"cannot stat {entry.path} ({exc.strerror})")
