"""Pack files: the small blobs of one stored value in a single file.

Storing a value of hundreds of tensors as hundreds of loose files costs a file,
an fsync and a rename each to write, and an open and a mapping each to restore;
for tensors of a few MiB those per-file costs are most of a hit. A pack holds
such blobs back to back, so a value is written with one fsync and restored with
one mapping (as git and restic pack their small objects). Each member is still
an object of its own: its id is the digest of its bytes, it is deduplicated
against every other object, and every read re-checks it (a mapped member is
proven against its id before use, through the verified record: ``verified.py``).

Layout of ``packs/<name>.pack`` (integers little-endian)::

    members     each member's bytes, starting at a multiple of ALIGN
    index       one 48-byte record per member, in file order:
                32 bytes raw BLAKE3 digest (the member's id), 8 bytes offset,
                8 bytes length
    trailer     8 bytes MAGIC, 8 bytes index offset, 8 bytes member count,
                8 bytes zero

``<name>`` is the BLAKE3 digest of the index bytes: it names the member set and
their places, so two writers of the same members write the same file, and a
reader checks the index against the name before trusting any offset in it.
Packs are written to ``tmp/``, fsynced and renamed into place like loose objects,
and never modified afterwards.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from ..errors import CorruptObject
from .fsutil import write_all

Buffer = bytes | bytearray | memoryview

MAGIC = b"MSPACK01"
SUFFIX = ".pack"
# Members start on a 64-byte boundary: a tensor blob's data (8-aligned within
# its blob) then starts aligned for every dtype, and on a cache line.
ALIGN = 64
_RECORD = struct.Struct("<32sQQ")
_TRAILER = struct.Struct("<8sQQQ")
# Blobs up to this size are packed. Bigger ones stay loose files: their per-file
# costs are small next to their size, and a loose file can be hard-linked by a
# push or a snapshot, where a pack member must be copied out.
PACK_BLOB_MAX = 8 << 20
# A writer starts a new pack once this many bytes are in one (gc merges small
# packs up to the same size): a partly dead pack is rewritten whole by gc, so its
# size bounds that cost, and a restore maps one pack per this many bytes.
PACK_MAX_BYTES = 512 << 20
# A directory listing whose time is this close to a pack rename may have missed
# it (file system timestamps are coarse): such a listing is never trusted twice.
_RACY_S = 2.0
_RELIST_NS = 20_000_000


@dataclass(frozen=True, slots=True)
class Pack:
    """One pack file and its members: id -> (offset, length)."""

    name: str
    path: str
    size: int
    members: dict[str, tuple[int, int]] = field(repr=False)


@dataclass(frozen=True, slots=True)
class PackLocation:
    """Where a packed object's bytes are: *length* bytes at *offset* of *pack*."""

    pack: Pack
    offset: int
    length: int


class DamagedPack(Exception):
    """A pack file whose trailer or index cannot be trusted."""


def read_pack(path: str, name: str) -> Pack:
    """Read and check a pack's index; DamagedPack if it is not sound."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _TRAILER.size:
            raise DamagedPack("shorter than its trailer")
        trailer = os.pread(f.fileno(), _TRAILER.size, size - _TRAILER.size)
        magic, index_at, count, _ = _TRAILER.unpack(trailer)
        index_len = count * _RECORD.size
        if magic != MAGIC or index_at + index_len + _TRAILER.size != size:
            raise DamagedPack("its trailer is not a memostore pack trailer")
        index = os.pread(f.fileno(), index_len, index_at)
    if len(index) != index_len or blake3.blake3(index).hexdigest() != name:
        raise DamagedPack("its index does not hash to its name")
    members: dict[str, tuple[int, int]] = {}
    for raw, offset, length in _RECORD.iter_unpack(index):
        if offset + length > index_at:
            raise DamagedPack("a member lies outside the pack")
        members[raw.hex()] = (offset, length)
    return Pack(name, path, size, members)


class PackIndex:
    """Every pack of one store, and where each packed object is.

    Loaded lazily and refreshed when the packs directory changes, so packs
    written (or removed by gc) in other processes are seen. A lookup that misses
    refreshes first; one that hits a pack removed since is retried by the caller
    after :meth:`refresh` with ``force=True``.
    """

    def __init__(self, packs_dir: Path) -> None:
        self.dir = packs_dir
        self._dir_text = str(packs_dir)
        self._lock = threading.Lock()
        self._packs: dict[str, Pack] = {}
        self._where: dict[str, PackLocation] = {}
        self._in_several: set[str] = set()  # ids held by more than one pack
        self._seen: tuple[int, int] | None = None  # (mtime_ns, when listed) of the listing
        self.damaged: dict[str, str] = {}  # pack path -> why it is not used

    def lookup(self, object_id: str, refresh: bool = True) -> PackLocation | None:
        found = self._where.get(object_id)
        if found is None and refresh:
            # Read again whatever refresh says: another thread may have just loaded it.
            self.refresh()
            found = self._where.get(object_id)
        return found

    def contains(self, object_id: str) -> bool:
        return self.lookup(object_id) is not None

    def ids(self) -> list[str]:
        self.refresh()
        return list(self._where)

    def packs(self) -> list[Pack]:
        self.refresh()
        return list(self._packs.values())

    def refresh(self, force: bool = False) -> bool:
        """Re-read the packs directory if it changed; True if the index changed."""
        try:
            mtime = os.stat(self._dir_text).st_mtime_ns
        except FileNotFoundError:
            mtime = -1
        seen = self._seen
        listed_at = time.time_ns()
        if not force and seen is not None and seen[0] == mtime:
            racy = seen[1] - mtime <= _RACY_S * 1e9
            # A racy listing is redone, but not on every miss of a burst of them.
            if not racy or listed_at - seen[1] < _RELIST_NS:
                return False
        try:
            names = {n[: -len(SUFFIX)] for n in os.listdir(self._dir_text) if n.endswith(SUFFIX)}
        except FileNotFoundError:
            names = set()
        with self._lock:
            changed = False
            for gone in set(self._packs) - names:
                self._forget(self._packs[gone])
                changed = True
            for name in sorted(names - set(self._packs)):
                path = f"{self._dir_text}/{name}{SUFFIX}"
                if path in self.damaged:
                    continue
                try:
                    pack = read_pack(path, name)
                except DamagedPack as exc:
                    self.damaged[path] = str(exc)
                    continue
                except OSError:
                    continue  # removed since the listing, or unreadable now: next time
                self._remember(pack)
                changed = True
            self._seen = (mtime, listed_at)
        return changed

    def add(self, pack: Pack) -> None:
        """Register a pack this process just wrote."""
        with self._lock:
            self.damaged.pop(pack.path, None)
            if pack.name not in self._packs:
                self._remember(pack)

    def drop(self, pack: Pack, why: str = "") -> None:
        """Stop using *pack*; with *why*, also when it is listed again (it is damaged)."""
        with self._lock:
            if why:
                self.damaged[pack.path] = why
            if self._packs.get(pack.name) is pack:
                self._forget(pack)

    def _remember(self, pack: Pack) -> None:
        self._packs[pack.name] = pack
        where = self._where
        for object_id, (offset, length) in pack.members.items():
            if where.setdefault(object_id, PackLocation(pack, offset, length)).pack is not pack:
                self._in_several.add(object_id)  # written by concurrent writers

    def _forget(self, pack: Pack) -> None:
        del self._packs[pack.name]
        for object_id in pack.members:
            found = self._where.get(object_id)
            if found is not None and found.pack is pack:
                del self._where[object_id]
                if object_id in self._in_several:
                    for other in self._packs.values():
                        if object_id in other.members:
                            self._where[object_id] = PackLocation(other, *other.members[object_id])
                            break


HashWriter = Callable[[int, Iterable[Buffer], int], str]


class PackWriter:
    """Writes one pack: members are streamed to a temp file as they come.

    *present* tells whether an object is already stored (and freshens it), so a
    member already stored elsewhere is not written twice; *publish* is called
    with the finished pack once it is in place, and the stat of the file written
    (taken after the rename, through the descriptor: this inode, whoever renamed
    last), so that the store can record every member as proven. Nothing is visible to readers
    before :meth:`finish`; :meth:`abort` (or a crash) leaves only a temp file,
    which gc removes once it is old.
    """

    def __init__(
        self,
        tmp_dir: Path,
        packs_dir: Path,
        hash_writer: HashWriter,
        present: Callable[[str], bool],
        publish: Callable[[Pack, os.stat_result], None],
    ) -> None:
        self._tmp_dir = tmp_dir
        self._packs_dir = packs_dir
        self._hash_writer = hash_writer
        self._present = present
        self._publish = publish
        self._fd: int | None = None
        self._tmp: Path | None = None
        self._pos = 0
        self._members: dict[str, tuple[int, int]] = {}

    @property
    def size(self) -> int:
        """Bytes of members written so far."""
        return self._pos

    def add(self, chunks: Iterable[Buffer], size: int, expected_id: str = "") -> str:
        """Append an object unless stored already; return its id.

        CorruptObject if the bytes do not hash to *expected_id* (nothing kept).
        """
        if expected_id and (expected_id in self._members or self._present(expected_id)):
            return expected_id
        fd = self._open()
        start = self._pos + (-self._pos % ALIGN)
        if start != self._pos:
            write_all(fd, memoryview(bytes(start - self._pos)))
        try:
            actual = self._hash_writer(fd, chunks, size)
            end = os.lseek(fd, 0, os.SEEK_CUR)
            if expected_id and actual != expected_id:
                raise CorruptObject(expected_id, actual, "bytes given to the store")
        except BaseException:
            self._rewind()
            raise
        if actual in self._members or self._present(actual):
            self._rewind()
        else:
            self._members[actual] = (start, end - start)
            self._pos = end
        return actual

    def finish(self) -> Pack | None:
        """Write the index, make the pack durable and put it in place (None if empty)."""
        if self._fd is None:
            return None
        fd, tmp = self._fd, self._tmp
        assert tmp is not None
        self._fd = self._tmp = None
        try:
            if not self._members:
                return None
            os.ftruncate(fd, self._pos)
            os.lseek(fd, self._pos, os.SEEK_SET)
            index = b"".join(
                _RECORD.pack(bytes.fromhex(i), off, n) for i, (off, n) in self._members.items()
            )
            write_all(fd, memoryview(index))
            write_all(fd, memoryview(_TRAILER.pack(MAGIC, self._pos, len(self._members), 0)))
            os.fsync(fd)
            name = blake3.blake3(index).hexdigest()
            self._packs_dir.mkdir(parents=True, exist_ok=True)
            final = self._packs_dir / f"{name}{SUFFIX}"
            os.chmod(tmp, 0o444)
            # A pack of the same name holds the same bytes: replacing it is harmless.
            os.replace(tmp, final)
            st = os.fstat(fd)
            size = self._pos + len(index) + _TRAILER.size
            pack = Pack(name, str(final), size, dict(self._members))
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self._publish(pack, st)
        return pack

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                self._tmp.unlink()
            self._tmp = None

    def _open(self) -> int:
        if self._fd is None:
            self._tmp_dir.mkdir(parents=True, exist_ok=True)
            self._tmp = self._tmp_dir / f"pack-{os.getpid()}-{uuid.uuid4().hex}"
            self._fd = os.open(self._tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        return self._fd

    def _rewind(self) -> None:
        """Drop what was written since the last member (its padding too)."""
        assert self._fd is not None
        os.ftruncate(self._fd, self._pos)
        os.lseek(self._fd, self._pos, os.SEEK_SET)
