"""Object databases: where object bytes live, keyed by their BLAKE3 id (the
contract every one keeps is :class:`BaseObjectStore`, in ``object_base.py``).

All files in an object database are written once and never modified
afterwards: a new object goes to a temp file in the store, is fsynced and then
renamed into place, so a reader sees either no object or all of it. Every read
of a whole object re-checks its digest; a mismatch moves the damaged file into
``quarantine/`` (so the next write of that id can repair it) and raises
:class:`CorruptObject`. A reader that memory-maps a large object proves the
mapped bytes with :meth:`BaseObjectStore.prove_mapped` before using them, which
on disk hashes them unless the verified record (``verified.py``) shows the file
unchanged since this store wrote, pulled or last proved it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import blake3

from ..errors import CorruptObject, ObjectNotFound
from .fsutil import barrier, fsync_dir, fsync_path, has_barrier, write_all
from .inside import LinkedStorePath, first_link, is_own_file, make_dirs_beneath, open_own_file
from .object_base import BaseObjectStore, Buffer
from .objects import digest_bytes, is_object_id, new_hasher
from .packs import SUFFIX, Pack, PackIndex, PackLocation, PackWriter
from .verified import ALL, RECORD_MIN_BYTES, Stamp, VerifiedRecord, hash_mapped, stamp_of

__all__ = ["BaseObjectStore", "DiskObjectStore", "MemoryObjectStore"]

_WRITE_CHUNK = 64 << 20
# From this size, hashing runs on a worker thread beside the writes: a state_dict's
# tensors of a few MiB each, written into one pack, then cost their write alone
# (1 GiB in 200 tensors: about 0.3 s less than hashing each before writing it).
_PIPELINE_MIN_BYTES = 1 << 20
# Objects below this size wait for the evaluation's barrier (one syncfs) instead of
# an fsync each. A larger one is fsynced as written: its own bytes dominate its
# flush, and syncfs would also wait for every other process's dirty pages.
_DEFER_MAX_BYTES = 1 << 20
# A packed object's read follows its pack through this many rewrites by gc
# (each of which lists the packs again) before it reports the object missing.
_PACK_READ_TRIES = 8


class MemoryObjectStore(BaseObjectStore):
    """The in-memory twin of :class:`DiskObjectStore`, for tests and scratch work."""

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.quarantined: dict[str, bytes] = {}

    def contains(self, object_id: str) -> bool:
        return object_id in self._objects

    def _read_raw(self, object_id: str) -> bytes:
        try:
            return self._objects[object_id]
        except KeyError:
            raise ObjectNotFound(object_id) from None

    def _write_new(self, object_id: str, chunks: Iterable[Buffer], size: int) -> str:
        data = b"".join(bytes(c) for c in chunks)
        actual = digest_bytes(data)
        if object_id and actual != object_id:
            raise CorruptObject(object_id, actual)
        with self._lock:
            self._objects.setdefault(actual, data)
        return actual

    def iter_ids(self) -> Iterator[str]:
        return iter(list(self._objects))

    def delete(self, object_id: str) -> None:
        with self._lock:
            self._objects.pop(object_id, None)
        self.forget_cached(object_id)

    def size_of(self, object_id: str) -> int:
        return len(self._read_raw(object_id))

    def quarantine(self, object_id: str) -> None:
        with self._lock:
            data = self._objects.pop(object_id, None)
        if data is not None:
            self.quarantined[object_id] = data
        self.forget_cached(object_id)

    def tamper(self, object_id: str, data: bytes) -> None:
        """Replace an object's bytes without checking (tests of corruption only)."""
        self._objects[object_id] = data


class DiskObjectStore(BaseObjectStore):
    """Loose objects in a two-level fan-out, ``objects/ab/cdef...``, and packs of
    small blobs in ``packs/`` (see packs.py).

    Files are made read-only once in place. Temp files live in ``tmp/`` on the
    same file system so the final rename is atomic; a crash leaves at most a
    temp file, which gc removes once it is old. Packed objects are removed only
    by gc, a pack at a time (:meth:`remove_pack`, :meth:`rewrite_pack`). Each
    large object and each pack this store writes enters the verified record
    (``verified/``) with the stat it has once in place.
    """

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = Path(root)
        self.objects_dir = self.root / "objects"
        self._objects_text = str(self.objects_dir)
        self.tmp_dir = self.root / "tmp"
        self.quarantine_dir = self.root / "quarantine"
        self.packs = PackIndex(self.root / "packs")
        self.verified = VerifiedRecord(self.root / "verified", self.tmp_dir)
        self._dirty_dirs: set[Path] = set()
        # Objects renamed into place before their bytes were fsynced: the next
        # sync() makes them durable together (group commit), before any ref names them.
        self._dirty_files: list[str] = []
        self._group_commit = has_barrier()
        self._dirty_lock = threading.Lock()
        self._freshened: dict[str, float] = {}  # pack name -> when this process last did
        self._root_text = str(self.root)
        # Fan directories (objects/ab) found to be no symbolic link, in this process.
        self._fans_checked: set[str] = set()

    def path_of(self, object_id: str) -> Path:
        return Path(self._path_text(object_id))

    def _path_text(self, object_id: str) -> str:
        # Plain string joins: this runs once per object read, tens of thousands of
        # times for a large result, where pathlib's parsing shows up in profiles.
        fan = object_id[:2]
        if fan not in self._fans_checked:
            self._check_fan(fan)
        return f"{self._objects_text}/{fan}/{object_id[2:]}"

    def _check_fan(self, fan: str) -> None:
        """Refuse a fan directory (or ``objects/``) that is a symbolic link.

        Every read, write, touch and delete of a loose object builds its path
        here, so none goes through a link planted in the store; a fan found sound
        is not checked again by this process.
        """
        link, whole = first_link(self._root_text, ("objects", fan))
        if link is not None:
            raise LinkedStorePath(link)
        if whole:
            self._fans_checked.add(fan)

    def contains(self, object_id: str) -> bool:
        return (
            self.packs.lookup(object_id, refresh=False) is not None
            or os.path.exists(self._path_text(object_id))
            or self.packs.contains(object_id)
        )

    def blob_path(self, object_id: str) -> Path | None:
        text = self._path_text(object_id)
        return Path(text) if is_own_file(text) else None

    def blob_file(self, object_id: str) -> str | None:
        text = self._path_text(object_id)
        # Mapped by its path elsewhere: a link at its name is never handed out (the
        # read then goes through _open_loose, which refuses it).
        return None if os.path.islink(text) else text

    def pack_location(self, object_id: str, refresh: bool = True) -> PackLocation | None:
        return self.packs.lookup(object_id, refresh)

    def freshen(self, object_id: str) -> bool:
        loc = self.packs.lookup(object_id, refresh=False)
        if loc is None:
            path = self._path_text(object_id)
            try:
                before = os.lstat(path)
                if stat.S_ISLNK(before.st_mode):
                    raise LinkedStorePath(path)  # never touched through (nor trusted)
                os.utime(path, follow_symlinks=False)
            except FileNotFoundError:
                loc = self.packs.lookup(object_id)
                if loc is None:
                    return False
            except OSError:
                # A read-only store or another user's file: present, its time unchanged.
                return self.contains(object_id)
            else:
                if before.st_size >= RECORD_MIN_BYTES:
                    self._carry_proof(_loose_key(object_id), path, before)
                return True
        return self._freshen_pack(object_id, loc)

    def _freshen_pack(self, object_id: str, loc: PackLocation | None) -> bool:
        # Reusing a value's blobs freshens its pack once per blob: once a second is
        # enough for gc's grace period, which is hours.
        for _ in range(_PACK_READ_TRIES):
            if loc is None:
                break
            now = time.monotonic()
            if now - self._freshened.get(loc.pack.name, -2.0) < 1.0:
                return True
            try:
                before = os.stat(loc.pack.path)
                os.utime(loc.pack.path)
            except FileNotFoundError:
                # Rewritten or removed by gc since we listed it: look again.
                self.packs.refresh(force=True)
                loc = self.packs.lookup(object_id, refresh=False)
                continue
            except OSError:
                return True  # a read-only store: present, its time unchanged
            self._freshened[loc.pack.name] = now
            self._carry_proof(_pack_key(loc.pack.name), loc.pack.path, before)
            return True
        return os.path.exists(self._path_text(object_id))

    def _carry_proof(self, key: str, path: str, before: os.stat_result) -> None:
        with contextlib.suppress(OSError):
            self.verified.carry(key, before, os.stat(path))

    def keeping_proof(self, object_id: str) -> contextlib.AbstractContextManager[None]:
        return self._keeping_proof(object_id)

    @contextlib.contextmanager
    def _keeping_proof(self, object_id: str) -> Iterator[None]:
        path = self._path_text(object_id)
        try:
            before = os.stat(path)
        except OSError:
            before = None
        yield
        if before is not None and before.st_size >= RECORD_MIN_BYTES:
            self._carry_proof(_loose_key(object_id), path, before)

    # -- mapped reads ----------------------------------------------------------------------
    def prove_mapped(
        self,
        object_id: str,
        data: Callable[[], Buffer],
        path: str,
        stamp: Stamp,
        packed: bool = False,
        always: bool = False,
    ) -> bool:
        if packed:
            key, member = _pack_key(os.path.basename(path)[: -len(SUFFIX)]), object_id
        else:
            key, member = _loose_key(object_id), ALL
        if not always and self.verified.covers(key, stamp, member):
            return True
        actual = hash_mapped(data())
        try:
            # Changed while hashed (rewritten, replaced): the hash proves nothing about it.
            if stamp_of(os.stat(path)) != stamp:
                return False
        except FileNotFoundError:
            return False
        if actual != object_id:
            self.quarantine(object_id)
            raise CorruptObject(object_id, actual, path)
        self.verified.add(key, stamp, (member,))
        return True

    def proven_pack_members(self, path: str, stamp: Stamp) -> frozenset[str]:
        key = _pack_key(os.path.basename(path)[: -len(SUFFIX)])
        return self.verified.proven(key, stamp)

    def forget_loose(self, object_id: str, size: int) -> None:
        """Drop what this process and the verified record hold of a loose object of
        *size* bytes that was just deleted. Only files of at least
        ``RECORD_MIN_BYTES`` are ever recorded (an object's size never changes),
        so a smaller one costs no unlink of a record that cannot exist."""
        self.forget_cached(object_id)
        if size >= RECORD_MIN_BYTES:
            self.verified.forget(_loose_key(object_id))

    def forget_verified(self, object_id: str) -> None:
        self.verified.forget(_loose_key(object_id))
        loc = self.packs.lookup(object_id, refresh=False)
        if loc is not None:
            self.verified.forget(_pack_key(loc.pack.name))

    def _read_raw(self, object_id: str) -> bytes:
        if self.packs.lookup(object_id, refresh=False) is None:
            try:
                with open_own_file(self._path_text(object_id)) as f:
                    return f.read()
            except FileNotFoundError:
                pass
        return bytes(self._read_packed(object_id))

    def _read_raw_into_bytearray(self, object_id: str) -> bytearray:
        if self.packs.lookup(object_id, refresh=False) is None:
            try:
                with open_own_file(self._path_text(object_id)) as f:
                    return _read_into(f, os.fstat(f.fileno()).st_size, 0)
            except FileNotFoundError:
                pass
        return self._read_packed(object_id)

    def _read_packed(self, object_id: str) -> bytearray:
        loc = self.packs.lookup(object_id)
        for _ in range(_PACK_READ_TRIES):
            if loc is not None:
                try:
                    with open(loc.pack.path, "rb") as f:
                        return _read_into(f, loc.length, loc.offset)
                except FileNotFoundError:
                    pass  # its pack was rewritten or removed by gc since it was listed
            # List the packs again: a pack written (or rewritten) since holds it.
            if not self.packs.refresh(force=True) and loc is None:
                break
            loc = self.packs.lookup(object_id, refresh=False)
        raise ObjectNotFound(object_id)

    def size_of(self, object_id: str) -> int:
        loc = self.packs.lookup(object_id, refresh=False)
        if loc is not None:
            return loc.length
        try:
            return os.stat(self.path_of(object_id)).st_size
        except FileNotFoundError:
            loc = self.packs.lookup(object_id)
            if loc is None:
                raise ObjectNotFound(object_id) from None
            return loc.length

    def _write_new(self, object_id: str, chunks: Iterable[Buffer], size: int) -> str:
        if object_id and self.freshen(object_id):
            return object_id
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp_dir / f"obj-{os.getpid()}-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            actual = _hash_while_writing(fd, chunks, size)
            deferred = self._group_commit and size < _DEFER_MAX_BYTES
            if not deferred:
                os.fsync(fd)
            if object_id and actual != object_id:
                raise CorruptObject(object_id, actual, "bytes given to the store")
            if self._place(fd, tmp, actual) and deferred:
                with self._dirty_lock:
                    self._dirty_files.append(self._path_text(actual))
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # left only on failure, or when the object was present
        return actual

    def add_downloaded(self, tmp: Path, object_id: str) -> bool:
        """Adopt *tmp*, a file in ``tmp/`` that should hold *object_id*: check, place it.

        The file is hashed through the descriptor that then becomes the object,
        fsynced, made read-only and renamed into place (so a big download is
        written to disk once), and enters the verified record. Returns False if
        the object was already present (*tmp* is removed either way); raises
        :class:`CorruptObject` if the bytes do not hash to *object_id*.
        """
        if not is_object_id(object_id):
            raise ValueError(f"not an object id: {object_id!r}")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            hasher = new_hasher(size)
            if size:
                with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
                    hasher.update(data)
            actual = hasher.hexdigest()
            os.fsync(fd)
            if actual != object_id:
                raise CorruptObject(object_id, actual, "the downloaded file")
            return self._place(fd, tmp, actual)
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _place(self, fd: int, tmp: Path, object_id: str) -> bool:
        """Rename the checked temp file open as *fd* into place; False if present already."""
        if self.freshen(object_id):
            return False
        final = self.path_of(object_id)
        fan = object_id[:2]
        if not final.parent.is_dir() or fan not in self._fans_checked:
            # Made beneath the store's root: a rename never lands through a link.
            make_dirs_beneath(self._root_text, f"objects/{fan}")
            self._fans_checked.add(fan)
        os.fchmod(fd, 0o444)
        # Another writer may rename the same id concurrently: both files hold the
        # same bytes, so whichever rename lands last is equally correct.
        os.replace(tmp, final)
        with self._dirty_lock:
            self._dirty_dirs.add(final.parent)
        st = os.fstat(fd)  # this inode, after the rename (which set its ctime)
        if st.st_size >= RECORD_MIN_BYTES:
            self.verified.add(_loose_key(object_id), stamp_of(st))
        return True

    def sync(self, also: int | None = None) -> None:
        """Make the objects written since the last sync durable: one barrier for all.

        *also*, a descriptor (a ref's new content), is made durable by the same
        barrier, or by an fsync of its own where none was needed.

        Where the file system offers one (``syncfs``), a single call covers the
        bytes of every small object written since and every rename; large objects,
        and all objects elsewhere, were fsynced as written, and the directories
        that received them are fsynced here.
        """
        with self._dirty_lock:
            dirs, self._dirty_dirs = self._dirty_dirs, set()
            files, self._dirty_files = self._dirty_files, []
        if files and barrier(self._root_text):
            return
        for f in files:  # the barrier failed: make them durable one by one
            fsync_path(f)
        for d in dirs:
            fsync_dir(d)
        if also is not None:
            os.fsync(also)

    def iter_ids(self) -> Iterator[str]:
        packed = set(self.packs.ids())
        if self.objects_dir.is_dir() and not self.objects_dir.is_symlink():
            for fan in sorted(os.listdir(self.objects_dir)):
                if len(fan) != 2 or os.path.islink(self.objects_dir / fan):
                    continue  # a link is never listed through (fsck names it)
                with contextlib.suppress(FileNotFoundError):
                    for rest in os.listdir(self.objects_dir / fan):
                        object_id = fan + rest
                        if is_object_id(object_id):
                            packed.discard(object_id)
                            yield object_id
        yield from packed

    def delete(self, object_id: str) -> None:
        """Remove a loose object (packed ones go with their pack: see gc)."""
        with contextlib.suppress(FileNotFoundError):
            self.path_of(object_id).unlink()
        self.forget_cached(object_id)
        self.verified.forget(_loose_key(object_id))

    def quarantine(self, object_id: str) -> None:
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = self.quarantine_dir / f"{object_id}.{uuid.uuid4().hex[:8]}"
        _move_to_quarantine(self.path_of(object_id), target)
        self.forget_cached(object_id)
        self.verified.forget(_loose_key(object_id))
        loc = self.packs.lookup(object_id, refresh=False)
        if loc is not None:
            self._quarantine_pack(loc.pack, object_id)

    # -- packs ---------------------------------------------------------------------------
    def new_pack(self) -> PackWriter:
        return PackWriter(
            self.tmp_dir, self.packs.dir, _hash_while_writing, self.freshen, self._published
        )

    def _published(self, pack: Pack, st: os.stat_result) -> None:
        self.packs.add(pack)
        with self._dirty_lock:
            self._dirty_dirs.add(self.packs.dir)
        # Every member was hashed as it was written (see PackWriter.add).
        self.verified.add(_pack_key(pack.name), stamp_of(st))

    def remove_pack(self, pack: Pack) -> None:
        """Delete a pack and every object in it (gc, once none is reachable)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pack.path)
        self.packs.drop(pack)
        self.verified.forget(_pack_key(pack.name))
        for object_id in pack.members:
            self.forget_cached(object_id)

    def rewrite_pack(self, pack: Pack, keep: Iterable[str]) -> Pack | None:
        """Copy the members *keep* of *pack* into a new pack, then delete *pack*."""
        return self.repack([(pack, list(keep))])

    def repack(self, sources: list[tuple[Pack, list[str]]]) -> Pack | None:
        """Copy the listed members of each pack into one new pack, then delete them.

        The new pack is durable before an old one goes, so a crash in between
        leaves both (the next gc removes the old). A member that fails its
        digest check is not copied.
        """
        writer = PackWriter(
            self.tmp_dir, self.packs.dir, _hash_while_writing, lambda _i: False, self._published
        )
        try:
            for pack, keep in sources:
                with open(pack.path, "rb") as f:
                    for object_id in keep:
                        offset, length = pack.members[object_id]
                        data = _read_into(f, length, offset)
                        with contextlib.suppress(CorruptObject):
                            writer.add((data,), length, expected_id=object_id)
            new = writer.finish()
        except BaseException:
            writer.abort()
            raise
        fsync_dir(self.packs.dir)
        for pack, _ in sources:
            # The same members at the same places make the same pack: a source
            # can be its own rewrite (then it is the new pack, not garbage).
            if new is None or pack.name != new.name:
                self.remove_pack(pack)
        return new

    def quarantine_damaged_packs(self) -> int:
        """Move packs readers cannot use (their index does not match their name) to
        ``quarantine/``; return how many. Their objects are already missing to
        every reader; the file is kept for the quarantine period, like a damaged
        object, for whoever wants to look into it."""
        moved = 0
        for path in list(self.packs.damaged):
            if not os.path.exists(path):
                continue
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            target = self.quarantine_dir / f"{Path(path).name}.{uuid.uuid4().hex[:8]}"
            _move_to_quarantine(Path(path), target)
            self.verified.forget(_pack_key(Path(path).name[: -len(SUFFIX)]))
            moved += 1
        return moved

    def _quarantine_pack(self, pack: Pack, damaged: str) -> None:
        """Move a pack with a damaged member aside, its sound members kept as loose objects."""
        # Dropped first, so that the loose copies below are written.
        self.packs.drop(pack, f"member {damaged} failed its digest check")
        with contextlib.suppress(FileNotFoundError), open(pack.path, "rb") as f:
            for object_id, (offset, length) in pack.members.items():
                if object_id == damaged or os.path.exists(self._path_text(object_id)):
                    continue
                data = _read_into(f, length, offset)
                with contextlib.suppress(CorruptObject):
                    self._write_new(object_id, (data,), length)
        self.sync()
        target = self.quarantine_dir / f"{pack.name}.pack.{uuid.uuid4().hex[:8]}"
        _move_to_quarantine(Path(pack.path), target)
        self.verified.forget(_pack_key(pack.name))


def _loose_key(object_id: str) -> str:
    return f"objects/{object_id[:2]}/{object_id[2:]}"


def _pack_key(name: str) -> str:
    return f"packs/{name}"


def _move_to_quarantine(path: Path, target: Path) -> None:
    """Move a damaged file aside; gc deletes it once the quarantine period has passed
    since now (not since it was written)."""
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return
    with contextlib.suppress(OSError):
        os.utime(target)


def _read_into(f: Any, size: int, offset: int) -> bytearray:
    """*size* bytes of open file *f* from *offset*, in a fresh buffer (short at end of file)."""
    buf = bytearray(size)
    view = memoryview(buf)
    f.seek(offset)
    got = 0
    while got < size:
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return buf if got == size else buf[:got]


_hash_worker: ThreadPoolExecutor | None = None
_hash_worker_lock = threading.Lock()


def _hash_while_writing(fd: int, chunks: Iterable[Buffer], size: int) -> str:
    """Write *chunks* to *fd* and return their digest.

    Large objects are hashed on a worker thread one piece behind the writes
    (both release the GIL), so storing costs about as much as writing alone.
    """
    if size < _PIPELINE_MIN_BYTES:
        hasher = new_hasher(size)
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            hasher.update(view)
            write_all(fd, view)
        return hasher.hexdigest()
    global _hash_worker
    with _hash_worker_lock:
        if _hash_worker is None:
            _hash_worker = ThreadPoolExecutor(1, thread_name_prefix="memostore-hash")
        worker = _hash_worker
    hasher = blake3.blake3()
    pending: list[Future[Any]] = []
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            for start in range(0, len(view), _WRITE_CHUNK):
                part = view[start : start + _WRITE_CHUNK]
                # One worker runs the updates in submission order.
                pending.append(worker.submit(hasher.update, part))
                write_all(fd, part)
    finally:
        for future in pending:
            future.result()
    return hasher.hexdigest()
