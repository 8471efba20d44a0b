"""Origin records: which objects of a store came from which remote.

Code stored by value (a cloudpickle payload) runs when it is loaded, so it is
loaded only from objects this machine wrote itself or pulled from a remote
the user marked trusted. A pull (and an auto-fetch) therefore records, for
every object it is about to store, the remote it comes from; an object
written locally has no record. Layout (``docs/format.md``, origin records)::

    origins/sources/<key>.json       {"endpoint": E, "name": N, "url": U}
    origins/<key>/<name>.ids         the ids one pull took from source <key>:
                                     sorted, one 64-hex id and "\\n" per line

``key`` is the first 32 hex digits of
``BLAKE3("memostore:origin:1\\n" + canonical JSON of {"endpoint", "url"})``.

One journal file per pull and source, written whole (temp file, fsync,
rename) before the pull's first object arrives: a pull costs one more file
and fsync however many objects it brings, and a pull killed half-way and run
again, which skips the objects already present, finds them recorded.
Writers never share a file, so concurrent pulls never conflict. ``gc``
forgets the ids of the objects it deleted (:func:`forget`), so that the
records do not grow forever and an object written again here later is not
taken for a pulled one; a record left stale can only make the store refuse
an object, never trust one.

Reading maps each journal once per process and bisects it (lines have one
width); only a by-value payload's blob is ever looked up. Trust is judged
when the payload is loaded, from the store's ``config.json``: every source of
the object must be a configured remote marked trusted.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import mmap
import os
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..odb.fsutil import fsync_dir, write_all
from ..odb.objects import canonical_json, digest_bytes, is_object_id

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore
    from ..odb.store import Store
    from ..transport import Transport
    from ..transport.config import RemoteConfig

ORIGINS_DIR = "origins"
SOURCES_DIR = "origins/sources"
JOURNAL_SUFFIX = ".ids"
KEY_HEX = 32
_LINE = 65  # 64 hex digits and a newline
_lock = threading.Lock()


@dataclass(frozen=True)
class Source:
    """A place objects came from: a remote's URL (and S3 endpoint).

    Attributes:
        url: the transport's URL (``file:///shared/ms``, ``s3://bucket/prefix``).
        endpoint: the S3 endpoint, None for AWS itself and for other remotes.
        name: the remote's name when it was recorded (messages only).
    """

    url: str
    endpoint: str | None = None
    name: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        data = canonical_json({"endpoint": self.endpoint, "url": self.url})
        return digest_bytes(b"memostore:origin:1\n" + data)[:KEY_HEX]

    def to_bytes(self) -> bytes:
        return canonical_json({"endpoint": self.endpoint, "name": self.name, "url": self.url})

    @classmethod
    def from_bytes(cls, data: bytes) -> Source | None:
        """The source a descriptor holds, or None when it is not one."""
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            return None
        endpoint, name = body.get("endpoint"), body.get("name")
        return cls(
            body["url"],
            endpoint if isinstance(endpoint, str) else None,
            name if isinstance(name, str) else "",
        )


def source_of_transport(transport: Transport, name: str = "") -> Source:
    """The source of objects read through *transport*."""
    endpoint = getattr(transport, "endpoint_url", None)
    return Source(transport.url, endpoint if isinstance(endpoint, str) else None, name)


def source_of_remote(remote: RemoteConfig) -> Source:
    """The source a configured remote's transport records (opens no connection)."""
    if remote.url.startswith("s3://"):
        from ..transport.s3 import endpoint_from_env

        parts = urlsplit(remote.url)
        prefix = unquote(parts.path).strip("/")
        url = f"s3://{parts.netloc}/{prefix}" if prefix else f"s3://{parts.netloc}"
        return Source(url, remote.endpoint or endpoint_from_env(), remote.name)
    from ..transport.config import open_remote

    transport = open_remote(remote, "pull")  # a directory or memory remote: touches nothing
    try:
        return source_of_transport(transport, remote.name)
    finally:
        transport.close()


def descriptor_name(key: str) -> str:
    return f"{SOURCES_DIR}/{key}.json"


def journal_name(key: str) -> str:
    """A new journal's name: unique, and sorting by the time it was written."""
    stamp = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(6).hex()}"
    return f"{ORIGINS_DIR}/{key}/{stamp}{JOURNAL_SUFFIX}"


def journal_bytes(ids: Iterable[str]) -> bytes:
    return "".join(f"{i}\n" for i in sorted(set(ids))).encode("ascii")


def parse_journal(data: bytes) -> list[str]:
    """The ids of a journal read from elsewhere (lines that are not ids are ignored)."""
    lines = data.decode("ascii", errors="replace").split("\n")
    return [line for line in lines if is_object_id(line)]


# -- writing --------------------------------------------------------------------------------
class _MemoryOrigins:
    """Origins of a store that lives in memory (tests, scratch)."""

    def __init__(self) -> None:
        self.by_id: dict[str, set[Source]] = {}


# Keyed by the object database, which is what a decoder holds; the store is kept
# weakly so that a memory store can still be freed.
_memory: weakref.WeakKeyDictionary[Any, _MemoryOrigins] = weakref.WeakKeyDictionary()
_stores: weakref.WeakKeyDictionary[Any, weakref.ref[Store]] = weakref.WeakKeyDictionary()


def record(store: Store, origins: dict[str, set[Source]]) -> None:
    """Record that each object id came from each of its sources; durable on return."""
    by_source: dict[Source, list[str]] = {}
    for object_id, sources in origins.items():
        if is_object_id(object_id):
            for source in sources:
                by_source.setdefault(source, []).append(object_id)
    if not by_source:
        return
    _stores[store.objects] = weakref.ref(store)
    if store.root is None:
        with _lock:
            memory = _memory.setdefault(store.objects, _MemoryOrigins())
            for source, ids in by_source.items():
                for object_id in ids:
                    memory.by_id.setdefault(object_id, set()).add(source)
        return
    for source, ids in by_source.items():
        _write_once(store.root, descriptor_name(source.key), source.to_bytes(), replace=False)
        _write_once(store.root, journal_name(source.key), journal_bytes(ids), replace=True)
    fsync_dir(store.root / ORIGINS_DIR)
    fsync_dir(store.root)


def _write_once(root: Path, name: str, data: bytes, *, replace: bool) -> None:
    """Write *name* under *root* durably (temp file, fsync, rename or link, directory fsync).

    Without *replace*, an existing file is kept (``link`` fails on it): the first
    writer's descriptor stays, and it says the same as any later one.
    """
    final = root / name
    if not replace and final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
        try:
            write_all(fd, memoryview(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, final)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(final.parent)
    fsync_dir(final.parent.parent)


# -- forgetting -----------------------------------------------------------------------------
def forget(store: Store, deleted: Iterable[str], older_than: float) -> int:
    """Drop the records of objects gc deleted; return how many journals were rewritten.

    An id is dropped only while its object is absent (a pull or a call may
    have written it again since gc deleted it: its record then stays), and only
    from journals written before *older_than* (a Unix time: gc's grace period).
    A younger journal may belong to a pull still running, which writes an
    object after its journal: dropping the id first would leave that object
    with no record, taken for this machine's own. A pull that runs longer than
    the grace period is exposed the same way gc already exposes its objects.

    A journal is rewritten under a new name (temp file, fsync, rename) before
    the old one is removed, so a reader always sees the id in one of them or,
    once both steps are done, in neither.
    """
    gone = {i for i in deleted if is_object_id(i)}
    if not gone:
        return 0
    if store.root is None:
        with _lock:
            memory = _memory.get(store.objects)
            for object_id in gone if memory is not None else ():
                if not store.objects.contains(object_id):
                    memory.by_id.pop(object_id, None)
        return 0
    rewritten = 0
    for key in recorded_sources(store.root):
        directory = store.root / ORIGINS_DIR / key
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        for entry in entries:
            if _forget_in(store, store.root, key, entry, gone, older_than):
                rewritten += 1
    return rewritten


def _forget_in(
    store: Store,
    root: Path,
    key: str,
    entry: os.DirEntry[str],
    gone: set[str],
    older_than: float,
) -> bool:
    """Rewrite one journal without the ids of *gone* whose objects are absent."""
    name = entry.name
    if not name.endswith(JOURNAL_SUFFIX) or name.startswith("."):
        return False
    try:
        if entry.is_symlink() or entry.stat(follow_symlinks=False).st_mtime >= older_than:
            return False
        with open(entry.path, "rb") as f:
            ids = parse_journal(f.read())
    except OSError:
        return False
    keep = [i for i in ids if i not in gone or store.objects.contains(i)]
    if len(keep) == len(ids):
        return False
    if keep:
        _write_once(root, journal_name(key), journal_bytes(keep), replace=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(entry.path)
    fsync_dir(Path(entry.path).parent)
    return True


# -- reading --------------------------------------------------------------------------------
class _Journal:
    """One journal file, mapped: bisected for an id without reading it whole."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self._count = size // _LINE

    def __contains__(self, object_id: str) -> bool:
        if self._map is None:
            return False
        target = object_id.encode("ascii")
        lines = _Lines(self._map, self._count)
        i = bisect.bisect_left(lines, target)
        return i < self._count and lines[i] == target


class _Lines(Sequence[bytes]):
    """The id on each line of a mapped journal, as a sequence bisect can search."""

    def __init__(self, data: mmap.mmap, count: int) -> None:
        self._data = data
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        return self._data[i * _LINE : i * _LINE + _LINE - 1]


# store root -> (stamp of origins/sources, {key: Source})
_sources_cache: dict[Path, tuple[Any, dict[str, Source]]] = {}
# journal directory -> (its stamp, {file name: journal})
_journals: dict[Path, tuple[Any, dict[str, _Journal]]] = {}


# A directory changed this recently may change again within its timestamp's
# granularity, unseen: its listing is not cached (git's "racy" entries).
_RACY_NS = 2_000_000_000


def _stamp(path: Path) -> Any:
    """What identifies *path*'s state: None if absent, "racy" if too recent to cache."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if time.time_ns() - st.st_mtime_ns < _RACY_NS:
        return "racy"
    return (st.st_mtime_ns, st.st_ino, st.st_size)


def _cached(cache: dict[Path, tuple[Any, Any]], path: Path, stamp: Any) -> Any:
    entry = cache.get(path)
    return entry[1] if entry is not None and stamp != "racy" and entry[0] == stamp else None


def recorded_sources(root: Path) -> dict[str, Source]:
    """Every source recorded in the store at *root* (cached until a new one is added)."""
    directory = root / SOURCES_DIR
    stamp = _stamp(directory)
    if stamp is None:
        return {}
    cached = _cached(_sources_cache, root, stamp)
    if cached is not None:
        return cached
    sources: dict[str, Source] = {}
    for entry in os.scandir(directory):
        key, _, ext = entry.name.partition(".")
        if ext != "json" or len(key) != KEY_HEX:
            continue
        try:
            source = Source.from_bytes(Path(entry.path).read_bytes())
        except OSError:
            continue
        if source is not None and source.key == key:
            sources[key] = source
    with _lock:
        _sources_cache[root] = (stamp, sources)
    return sources


def _journals_of(directory: Path) -> list[_Journal]:
    stamp = _stamp(directory)
    if stamp is None:
        return []
    cached = _cached(_journals, directory, stamp)
    if cached is not None:
        return list(cached.values())
    previous = _journals.get(directory)
    # A journal never changes under its name (gc writes a new one): reuse the mapped
    # ones still listed, drop those gc removed.
    before = previous[1] if previous is not None else {}
    known: dict[str, _Journal] = {}
    for entry in os.scandir(directory):
        name = entry.name
        if not name.endswith(JOURNAL_SUFFIX) or name.startswith("."):
            continue
        if name in before:
            known[name] = before[name]
            continue
        with contextlib.suppress(OSError):
            known[name] = _Journal(Path(entry.path))
    with _lock:
        _journals[directory] = (stamp, known)
    return list(known.values())


def origins_of(objects: BaseObjectStore, object_id: str) -> set[Source]:
    """The remotes an object came from; empty when this store wrote it itself."""
    root = getattr(objects, "root", None)
    if not isinstance(root, Path):
        with _lock:
            memory = _memory.get(objects)
            return set(memory.by_id.get(object_id, ())) if memory is not None else set()
    if not is_object_id(object_id):
        return set()
    return {
        source
        for key, source in recorded_sources(root).items()
        if any(object_id in journal for journal in _journals_of(root / ORIGINS_DIR / key))
    }


def arrival_times(objects: BaseObjectStore, object_ids: Iterable[str]) -> dict[str, float]:
    """When each of *object_ids* that came from a remote arrived here (Unix time).

    Read from this store's own journals, whose names carry the time this
    machine recorded the pull (:func:`journal_name`): a local fact, unlike
    anything the remote's writer recorded in the objects. The earliest journal
    naming an object counts (gc rewrites a journal under a later name). Objects
    this store wrote itself are absent from the answer.
    """
    root = getattr(objects, "root", None)
    if not isinstance(root, Path):
        return {}
    wanted = [i for i in object_ids if is_object_id(i)]
    out: dict[str, float] = {}
    for key in recorded_sources(root):
        directory = root / ORIGINS_DIR / key
        _journals_of(directory)
        cached = _journals.get(directory)
        for name, journal in (cached[1] if cached is not None else {}).items():
            when = _journal_time(directory / name)
            for object_id in wanted:
                if object_id in journal and when < out.get(object_id, float("inf")):
                    out[object_id] = when
    return out


def _journal_time(path: Path) -> float:
    """When this machine wrote the journal at *path*: its name's stamp, else its mtime."""
    stamp = path.name.partition("-")[0]
    if len(stamp) == 20 and stamp.isdigit():
        return int(stamp) / 1e9
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def sources_of_records(objects: BaseObjectStore) -> list[Source]:
    """Every source recorded in the store of *objects* (for its data directories)."""
    root = getattr(objects, "root", None)
    if isinstance(root, Path):
        return list(recorded_sources(root).values())
    with _lock:
        memory = _memory.get(objects)
        return list({s for ss in memory.by_id.values() for s in ss}) if memory else []


# -- trust --------------------------------------------------------------------------------
# store root -> a Store opened on it, to read its config (cheap to keep, and few).
_disk_stores: dict[Path, Store] = {}
# config path -> (stamp of config.json, source key -> remote)
_trust_cache: dict[Path, tuple[Any, dict[str, RemoteConfig]]] = {}


def store_of(objects: BaseObjectStore) -> Store | None:
    """The store whose object database *objects* is (its config says what is trusted)."""
    root = getattr(objects, "root", None)
    if not isinstance(root, Path):
        ref = _stores.get(objects)
        return ref() if ref is not None else None
    store = _disk_stores.get(root)
    if store is None:
        from ..odb.store import Store

        try:
            store = Store(root, create=False)
        except Exception:
            return None
        with _lock:
            store = _disk_stores.setdefault(root, store)
    return store


def configured_sources(store: Store) -> dict[str, RemoteConfig]:
    """Source key -> configured remote (cached until ``config.json`` changes)."""
    from ..transport.config import list_remotes

    path = store.config_path
    stamp = _stamp(path) if path is not None else None
    if path is not None:
        cached = _cached(_trust_cache, path, stamp)
        if cached is not None:
            return cached
    out: dict[str, RemoteConfig] = {}
    for remote in list_remotes(store):
        with contextlib.suppress(Exception):  # a remote that cannot be opened names nothing
            out[source_of_remote(remote).key] = remote
    if path is not None:
        with _lock:
            _trust_cache[path] = (stamp, out)
    return out


def untrusted_origins(objects: BaseObjectStore, object_id: str) -> list[tuple[Source, Any]]:
    """(source, configured remote or None) for each source of the object not trusted."""
    sources = origins_of(objects, object_id)
    if not sources:
        return []
    store = store_of(objects)
    remotes = configured_sources(store) if store is not None else {}
    out = []
    for source in sorted(sources, key=lambda s: s.url):
        remote = remotes.get(source.key)
        if remote is None or not remote.trusted:
            out.append((source, remote))
    return out
