"""Checkouts: stored files laid out as plain files under the store's ``checkouts/``.

A restored :class:`~memostore.values.snapshot.Snapshot` (and each Arrow table of a
restored Hugging Face dataset) is served from a checkout: a directory
``checkouts/<key>/`` holding the file or tree under its own name, plus a
manifest ``.complete``. Three rules keep a checkout from being anything but
the stored value:

* **Data only.** The layout comes from a stored value, which a shared store
  or a remote may have crafted. Every path is checked before anything is
  written (:func:`check_layout`: relative, no ``..``, no empty or absolute
  part), and files are created beneath a fresh staging directory through
  directory descriptors with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing
  outside the checkout is followed, overwritten or created, whatever the
  value says. A checkout never holds links.
* **Copies, not links.** Each file is an independent copy of its stored
  object (a reflink where the file system shares blocks, see
  :mod:`memostore.odb.filecopy`), hashed once as it is laid out. Writing to a
  checkout (root ignores its read-only mode) never changes the store.
* **Verified before each use.** The manifest records each file's stat
  signature (inode, size, modification and change times, mode), and every
  restore compares the tree with it: an edited, added, removed or replaced
  file makes the checkout stale, and it is laid out again from the store. A
  file's modification time is set one second into the past when it is laid
  out, so any later write, even within the same clock tick, changes it.

A checkout is a cache: ``rm -rf checkouts/`` is always safe (files in use
stay readable until closed), and a restore lays out again what it needs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from ..errors import DecodeError, ObjectNotFound
from .filecopy import copy_fd
from .inside import join_beneath
from .objects import is_object_id, new_hasher

CHECKOUTS_DIRNAME = "checkouts"
MANIFEST_NAME = ".complete"
MANIFEST_VERSION = 1
# Staging directories and stale checkouts moved aside start with these (gc removes
# the ones a killed process left behind).
STAGING_PREFIX = ".checkout-"
STALE_PREFIX = ".stale-"
_HASH_CHUNK = 16 << 20
_PLACE_THREADS = 8
_PLACE_BATCH = 64
_NAME_MAX_BYTES = 255
_INSTALL_TRIES = 8
# A laid-out file's modification time: this far before the copy, so a later write
# (which sets it to the current time) always changes it.
_STAMP_OFFSET_NS = 1_000_000_000


class CheckoutEntry(Protocol):
    """One file to lay out (a :class:`~memostore.values.snapshot.SnapshotEntry` is one)."""

    relpath: str
    blob: str
    size: int
    executable: bool


# -- what a stored layout may say ----------------------------------------------------------
def _component_problem(part: Any) -> str | None:
    if not isinstance(part, str):
        return f"a path part must be text, not {type(part).__name__}"
    if not part:
        return "an empty path part (an absolute path, or '//')"
    if part in (".", ".."):
        return f"'{part}' is not allowed"
    if "/" in part or "\\" in part:
        return "a separator inside a name"
    if "\x00" in part:
        return "a NUL character"
    try:
        encoded = part.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "a name that is not valid text"
    if len(encoded) > _NAME_MAX_BYTES:
        return f"a name longer than {_NAME_MAX_BYTES} bytes"
    return None


def check_layout(what: str, name: Any, is_dir: bool, relpaths: Iterable[Any]) -> list[str]:
    """Refuse a stored layout that could reach outside its checkout; return its paths.

    Args:
        what: the kind of value, for messages ("snapshot").
        name: the base name of the file or directory laid out.
        is_dir: whether it is a directory tree (else a single file named *name*).
        relpaths: each file's path, relative to *name* for a tree (``/``-separated),
            or *name* itself for a single file.

    Returns:
        Each file's path relative to the checkout's root, in order.

    Raises:
        DecodeError: naming the first entry that is not a plain relative path
            (``..``, an absolute path, an empty part, a separator or NUL in a
            name), that appears twice, or that is both a file and a directory.
    """
    problem = _component_problem(name)
    if problem is None and name == MANIFEST_NAME:
        problem = f"'{MANIFEST_NAME}' is reserved in a checkout"
    if problem is not None:
        raise DecodeError(f"{what} name {name!r} is refused: {problem}")
    files: list[str] = []
    seen: set[str] = set()
    parents: set[str] = set()
    for relpath in relpaths:
        if not isinstance(relpath, str):
            raise DecodeError(f"{what} {name!r}: an entry's path is not text ({relpath!r})")
        if not is_dir:
            if relpath != name:
                raise DecodeError(
                    f"{what} {name!r}: entry {relpath!r} of a single file must be named {name!r}"
                )
            rel = name
        else:
            for part in relpath.split("/"):
                problem = _component_problem(part)
                if problem is not None:
                    raise DecodeError(
                        f"{what} {name!r}: entry {relpath!r} is refused ({problem}); only "
                        "relative paths inside the snapshot are restored"
                    )
            rel = f"{name}/{relpath}"
        if rel in seen:
            raise DecodeError(f"{what} {name!r}: entry {relpath!r} appears twice")
        seen.add(rel)
        files.append(rel)
        parts = rel.split("/")
        parents.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = seen & parents
    if clash:
        raise DecodeError(f"{what} {name!r}: entry {sorted(clash)[0]!r} is a file and a directory")
    if not is_dir and len(files) != 1:
        raise DecodeError(f"{what} {name!r}: a single file must have exactly one entry")
    return files


# -- where checkouts live --------------------------------------------------------------------
def checkout_root(objects: Any, key: str) -> Path:
    """The directory of the checkout named *key* (hex) for the store holding *objects*."""
    base = getattr(objects, "root", None)
    if base is None:
        base = _scratch_base()
    return Path(base) / CHECKOUTS_DIRNAME / key[:32]


def _scratch_base() -> Path:
    """Where an in-memory store's checkouts go: a directory of this user's in the
    temp directory (which others can write to, so it must be ours and no link)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    base = Path(tempfile.gettempdir()) / f"memostore-checkouts-{uid}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != uid):
        raise DecodeError(f"{base} is not a directory of this user's; remove it")
    return base


def ensure_checkout(
    objects: Any, key: str, what: str, name: str, is_dir: bool, entries: tuple[CheckoutEntry, ...]
) -> Path:
    """The path of an intact checkout of *entries* (``<root>/<name>``), laid out if needed.

    Args:
        objects: the object database holding the blobs.
        key: names the checkout (a digest of the stored value).
        what: the kind of value, for messages.
        name: the base name of the file or directory.
        is_dir: whether *entries* form a directory tree.
        entries: the files; paths as :func:`check_layout` takes them.

    Raises:
        DecodeError: the layout is refused, a stored file is missing or
            corrupt, or the files could not be written.
    """
    rels = check_layout(what, name, is_dir, (e.relpath for e in entries))
    for entry in entries:
        if type(entry.size) is not int or entry.size < 0:
            raise DecodeError(f"{what} {name!r}: entry {entry.relpath!r} has a bad size")
        # A path is built from the id: it must be one (not "../..").
        if not is_object_id(entry.blob):
            raise DecodeError(f"{what} {name!r}: entry {entry.relpath!r} names no object id")
        if type(entry.executable) is not bool:
            raise DecodeError(f"{what} {name!r}: entry {entry.relpath!r} has a bad mode")
    root = checkout_root(objects, key)
    if not intact(root, name, is_dir, rels):
        try:
            _lay_out(objects, root, what, name, is_dir, list(zip(rels, entries, strict=True)))
        except OSError as exc:
            raise DecodeError(
                f"cannot lay out the files of {what} {name!r} under {root.parent}: "
                f"{exc.strerror or exc}"
            ) from exc
    # The name is the stored value's: where the path handed out ends is checked, once
    # a link planted there has been replaced by the laid-out tree.
    return join_beneath(root, name)


# -- checking ----------------------------------------------------------------------------------
def _signature(st: os.stat_result) -> list[int]:
    # Not the device: a network file system may number it differently after a remount.
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _read_manifest(root: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(root / MANIFEST_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            manifest = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None  # a checkout of an older version (empty marker), or damaged
    if (
        not isinstance(manifest, dict)
        or manifest.get("v") != MANIFEST_VERSION
        or not isinstance(manifest.get("files"), dict)
    ):
        return None
    return manifest


def _scan(root: Path, name: str) -> tuple[dict[str, list[int]], set[str]] | None:
    """Signatures of the files under ``root/name`` and its directories; None if it
    holds anything else (a link, a device, a FIFO) or is missing."""
    files: dict[str, list[int]] = {}
    dirs: set[str] = set()
    try:
        st = os.lstat(root / name)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        files[name] = _signature(st)
        return files, dirs
    if not stat.S_ISDIR(st.st_mode):
        return None
    stack = [name]
    while stack:
        rel_dir = stack.pop()
        dirs.add(rel_dir)
        try:
            with os.scandir(root / rel_dir) as it:
                found = list(it)
        except OSError:
            return None
        for entry in found:
            rel = f"{rel_dir}/{entry.name}"
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return None
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                files[rel] = _signature(st)
            else:
                return None
    return files, dirs


def intact(root: Path, name: str, is_dir: bool, rels: list[str]) -> bool:
    """True when the checkout at *root* holds exactly the files *rels* names (and their
    directories), each unchanged since it was laid out (its manifest's signature)."""
    manifest = _read_manifest(root)
    if manifest is None or set(manifest["files"]) != set(rels):
        return False
    scanned = _scan(root, name)
    if scanned is None:
        return False
    files, dirs = scanned
    return files == manifest["files"] and dirs == _expected_dirs(name, is_dir, rels)


# -- laying out ----------------------------------------------------------------------------------
def _lay_out(
    objects: Any,
    root: Path,
    what: str,
    name: str,
    is_dir: bool,
    files: list[tuple[str, CheckoutEntry]],
) -> None:
    """Write the files into a fresh staging directory, then move it into place."""
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root.parent))
    os.chmod(staging, 0o755)  # mkdtemp's 0700 would hide it from others sharing the store
    rels = [rel for rel, _ in files]
    try:
        stamp_ns = time.time_ns() - _STAMP_OFFSET_NS
        with _DirFds(staging) as fds:
            for rel in sorted(_expected_dirs(name, is_dir, rels)):
                fds.make(rel)  # sorted: every parent before its children
            signatures = _place_all(objects, what, files, fds, stamp_ns)
        manifest = {"v": MANIFEST_VERSION, "files": signatures}
        _write_new(staging / MANIFEST_NAME, json.dumps(manifest, sort_keys=True).encode())
        _install(staging, root, lambda: intact(root, name, is_dir, rels))
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _expected_dirs(name: str, is_dir: bool, rels: Iterable[str]) -> set[str]:
    dirs = {name} if is_dir else set()
    for rel in rels:
        parts = rel.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return dirs


class _DirFds:
    """Descriptors of directories under a staging directory, opened without following
    links; a few are kept open (a deep or wide tree must not exhaust descriptors)."""

    _KEEP = 32

    def __init__(self, base: Path) -> None:
        self.base = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.open: OrderedDict[str, int] = OrderedDict()

    def __enter__(self) -> _DirFds:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.open.values():
            os.close(fd)
        os.close(self.base)

    def fd(self, rel: str) -> int:
        """The descriptor of directory *rel* (made already), valid until the next call."""
        if not rel:
            return self.base
        cached = self.open.get(rel)
        if cached is not None:
            self.open.move_to_end(rel)
            return cached
        current, done = self.base, ""
        for part in rel.split("/"):
            done = f"{done}/{part}" if done else part
            cached = self.open.get(done)
            if cached is None:
                cached = os.open(part, _DIR_FLAGS, dir_fd=current)
                self._keep(done, cached)
            current = cached
        return current

    def make(self, rel: str) -> None:
        """Create directory *rel* inside its (already made) parent."""
        parent, _, leaf = rel.rpartition("/")
        os.mkdir(leaf, 0o755, dir_fd=self.fd(parent))

    def _keep(self, rel: str, fd: int) -> None:
        self.open[rel] = fd
        while len(self.open) > self._KEEP:
            _, old = self.open.popitem(last=False)
            os.close(old)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Create, never open what exists, never follow a link.
_NEW_FILE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _place_all(
    objects: Any,
    what: str,
    files: list[tuple[str, CheckoutEntry]],
    fds: _DirFds,
    stamp_ns: int,
) -> dict[str, list[int]]:
    """Lay out every file; return their signatures by path.

    Several files at once: each waits for its own fsync, and those overlap (the
    disk sees them together); a batch at a time, so few descriptors are open.
    """
    signatures: dict[str, list[int]] = {}
    if len(files) == 1:
        ((rel, entry),) = files
        parent, _, leaf = rel.rpartition("/")
        signatures[rel] = _place(objects, what, entry, fds.fd(parent), leaf, stamp_ns)
        return signatures

    def place(job: tuple[str, CheckoutEntry, int]) -> list[int]:
        rel, entry, dir_fd = job
        try:
            return _place(objects, what, entry, dir_fd, rel.rpartition("/")[2], stamp_ns)
        finally:
            os.close(dir_fd)

    with ThreadPoolExecutor(_PLACE_THREADS, thread_name_prefix="memostore-checkout") as pool:
        for start in range(0, len(files), _PLACE_BATCH):
            batch = files[start : start + _PLACE_BATCH]
            # A duplicate descriptor per file: the cache of _DirFds is one thread's.
            jobs = [(rel, e, os.dup(fds.fd(rel.rpartition("/")[0]))) for rel, e in batch]
            for (rel, _), signature in zip(batch, pool.map(place, jobs), strict=True):
                signatures[rel] = signature
    return signatures


def _place(
    objects: Any, what: str, entry: CheckoutEntry, dir_fd: int, leaf: str, stamp_ns: int
) -> list[int]:
    """Create *leaf* in *dir_fd* as a copy of the entry's blob; return its signature."""
    fd = os.open(leaf, _NEW_FILE_FLAGS | os.O_RDWR, 0o600, dir_fd=dir_fd)
    try:
        _fill(objects, what, entry, fd)
        os.fsync(fd)  # the manifest vouches for these bytes: they must be on disk first
        os.fchmod(fd, 0o555 if entry.executable else 0o444)
        os.utime(fd, ns=(stamp_ns, stamp_ns))
        return _signature(os.fstat(fd))
    finally:
        os.close(fd)


def _fill(objects: Any, what: str, entry: CheckoutEntry, fd: int) -> None:
    source = objects.blob_path(entry.blob)
    if source is None:
        # Packed or in memory: get_bytes checks the digest.
        try:
            data = objects.get_bytes(entry.blob)
        except ObjectNotFound:
            raise DecodeError(f"the stored copy of {entry.relpath} is missing") from None
        except ValueError as exc:  # CorruptObject: quarantined by get_bytes
            raise DecodeError(f"the stored copy of {entry.relpath} is corrupt: {exc}") from None
        _check_size(what, entry, len(data))
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            offset += os.pwrite(fd, view[offset:], offset)
        return
    try:
        src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DecodeError(f"the stored copy of {entry.relpath} is missing") from None
    try:
        size = os.fstat(src).st_size
        _check_size(what, entry, size)
        copy_fd(src, fd, size)
        # Hash what was laid out: it proves the copy and the stored object at once.
        if _hash_fd(fd, size) != entry.blob:
            if _hash_fd(src, size) != entry.blob:
                objects.quarantine(entry.blob)
                raise DecodeError(
                    f"the stored copy of {entry.relpath} is corrupt (it does not hash to "
                    f"{entry.blob}); run `memostore fsck`"
                )
            raise DecodeError(f"the copy of {entry.relpath} came out different; check the disk")
    finally:
        os.close(src)


def _check_size(what: str, entry: CheckoutEntry, size: int) -> None:
    if size != entry.size:
        raise DecodeError(
            f"{what} entry {entry.relpath!r} records {entry.size} bytes, but its stored copy "
            f"holds {size}"
        )


def _hash_fd(fd: int, size: int) -> str:
    hasher = new_hasher(size)
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(_HASH_CHUNK, size - offset), offset)
        if not chunk:
            break
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, _NEW_FILE_FLAGS | os.O_WRONLY, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _install(staging: Path, root: Path, is_good: Callable[[], bool]) -> None:
    """Move *staging* to *root*, replacing a stale checkout there (never a good one).

    Several processes may restore the same value at once: the first rename wins,
    and a loser whose rename fails finds an intact checkout and uses it.
    """
    for _ in range(_INSTALL_TRIES):
        try:
            os.rename(staging, root)
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
        if is_good():
            return  # another process laid it out meanwhile
        # Stale (edited, or from an older version): move it aside, then delete it.
        # Programs that hold its files open keep reading them until they close them.
        aside = root.with_name(f"{STALE_PREFIX}{root.name}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(root, aside)
        except FileNotFoundError:
            continue  # moved aside by another process
        _remove_tree(aside)
    raise DecodeError(f"the checkout {root} kept changing while it was replaced; try again")


def _remove_tree(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def leftovers(checkouts_dir: Path) -> Iterator[Path]:
    """Staging directories and stale checkouts that killed processes left (for gc)."""
    try:
        with os.scandir(checkouts_dir) as it:
            for entry in it:
                if entry.name.startswith((STAGING_PREFIX, STALE_PREFIX)):
                    yield Path(entry.path)
    except OSError:
        return
