"""Moving objects between a store and a remote, verified, in parallel.

Downloads are checked against their id *before* they enter the object
database: a small object is hashed in memory, a big one is streamed to a
temporary file in the store's ``tmp/``, hashed, then renamed into place. A
mismatch stores nothing and raises :class:`CorruptRemoteObject`. A large object
pulled enters the store's verified record as it is placed (as one the store
wrote itself), so the first hit after a pull maps it without hashing it again.

Uploads send the local files as they are (``Transport.add_if_new``, which
skips an object that appeared meanwhile); their bytes are verified when they
are next pulled, and a directory remote can be checked whole with
``memostore --store REMOTE fsck``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, wait
from pathlib import Path
from typing import Any

from ..errors import CorruptObject, MalformedObject, ObjectNotFound
from ..odb.object_store import BaseObjectStore
from ..odb.objects import Doc, digest_bytes, is_object_id
from ..transport import RemoteError, RemoteObjectTooLarge, Transport
from .walk import TransferPlan, object_name

# Objects up to this size are downloaded into memory; bigger ones are streamed to disk.
SMALL_OBJECT = 8 << 20
# The most bytes a document read from a remote may hold: documents are parsed in
# memory, and one this large is far past anything memostore writes (a value's bulk
# bytes are blobs). A bigger one is refused unread.
DOC_MAX_BYTES = 256 << 20
# Many presence checks at once: list the fan-out directories instead (S3 only).
LIST_THRESHOLD = 1024


class CorruptRemoteObject(RemoteError, ValueError):
    """An object read from a remote does not hash to its id; nothing was stored from it.

    Attributes:
        expected: the id the object is stored under.
        actual: the digest of the bytes received.
        url: the remote's URL.
    """

    def __init__(self, expected: str, actual: str, url: str) -> None:
        self.expected = expected
        self.actual = actual
        self.url = url
        super().__init__(
            f"object {expected} on {url} is corrupt (its bytes hash to {actual}); nothing "
            "was stored from it. Delete that object on the remote and push it again from "
            "a store that has a sound copy"
        )


class TransferProgress:
    """Receives progress of a transfer; the default does nothing.

    ``advance`` is called from worker threads; implementations must be thread-safe.
    """

    def start(self, objects: int, nbytes: int) -> None:
        """The transfer phase begins: this many objects and bytes to move."""

    def advance(self, objects: int, nbytes: int) -> None:
        """This many more objects and bytes are done."""

    def finish(self) -> None:
        """The transfer ended (successfully or not)."""


def run_waves(
    pool: Executor,
    plan: TransferPlan,
    move: Callable[[str], bool],
    sizes: dict[str, int],
    progress: TransferProgress,
) -> tuple[int, int]:
    """Move every planned object, wave by wave; returns (objects, bytes) moved.

    A wave starts only when the previous one is complete, so a document never
    reaches the destination before what it links to. If any object fails, the
    rest of its wave finishes (those objects are good), later waves are not
    started, and the first error is raised: a rerun resumes from there.
    """
    moved = moved_bytes = 0

    def move_one(object_id: str) -> bool:
        created = move(object_id)
        progress.advance(1, sizes.get(object_id, 0))
        return created

    for wave in plan.waves():
        futures = {pool.submit(move_one, object_id): object_id for object_id in wave}
        wait(futures)
        error: BaseException | None = None
        for future, object_id in futures.items():
            exc = future.exception()
            if exc is not None:
                error = error or exc
            elif future.result():
                moved += 1
                moved_bytes += sizes.get(object_id, 0)
        if error is not None:
            raise error
    return moved, moved_bytes


# -- presence ------------------------------------------------------------------------------
class RemotePresence:
    """Answers "which of these objects does the remote have?" in bulk.

    A batch is checked by ``stat`` from the thread pool; a large batch on an
    object store is answered by listing the fan-out prefixes it touches
    (``objects/ab/``) once each, which costs at most 256 listings instead of one
    request per object. Listed prefixes are remembered for the rest of the walk.
    """

    def __init__(self, transport: Transport, pool: Executor, listing: bool) -> None:
        self.transport = transport
        self.pool = pool
        self.listing = listing
        self._listed: set[str] = set()
        self._known: set[str] = set()

    def __call__(self, ids: list[str]) -> set[str]:
        if not ids:
            return set()
        if self.listing and len(ids) >= LIST_THRESHOLD:
            fans = sorted({i[:2] for i in ids} - self._listed)
            for fan, names in zip(fans, self.pool.map(self._list_fan, fans), strict=True):
                self._listed.add(fan)
                self._known.update(names)
            return {i for i in ids if i in self._known}
        unknown = [i for i in ids if i[:2] not in self._listed]
        sizes = self.pool.map(lambda i: self.transport.stat(object_name(i)), unknown)
        found = {i for i, size in zip(unknown, sizes, strict=True) if size is not None}
        return found | {i for i in ids if i in self._known}

    def _list_fan(self, fan: str) -> list[str]:
        prefix = f"objects/{fan}/"
        out = []
        for name in self.transport.list(prefix):
            object_id = fan + name[len(prefix) :]
            if is_object_id(object_id):
                out.append(object_id)
        return out


def local_presence(objects: BaseObjectStore) -> Callable[[list[str]], set[str]]:
    """Presence in the local store. An object relied on as present is freshened, so
    that a concurrent gc's grace period covers it until the pulled ref names it."""
    return lambda ids: {i for i in ids if objects.freshen(i)}


# -- reading documents ---------------------------------------------------------------------
def read_remote_doc(transport: Transport, object_id: str) -> Doc:
    """A document from the remote, verified against its id, parsed (never decoded).

    Raises:
        RemoteObjectTooLarge: it holds more than ``DOC_MAX_BYTES`` (never read).
    """
    data = transport.get_bytes_at_most(object_name(object_id), DOC_MAX_BYTES)
    actual = digest_bytes(data)
    if actual != object_id:
        raise CorruptRemoteObject(object_id, actual, transport.url)
    return Doc.parse(data, object_id)


def read_local_doc(objects: BaseObjectStore, object_id: str) -> Doc:
    try:
        return objects.get_doc(object_id)
    except ObjectNotFound:
        raise ObjectNotFound(object_id) from None
    except MalformedObject as exc:
        raise MalformedObject(f"{exc}; run `memostore fsck`") from exc


# -- moving one object ---------------------------------------------------------------------
def upload(
    objects: BaseObjectStore, transport: Transport, plan: TransferPlan, object_id: str
) -> bool:
    """Send one object; True if this call created it on the remote."""
    name = object_name(object_id)
    doc = plan.docs.get(object_id)
    if doc is not None:
        return transport.add_if_new(name, doc.data)
    path = objects.blob_path(object_id)
    if path is not None:
        # Store files are written once and never changed: safe to hard-link. A link
        # sets the file's ctime: the store carries its proof across that change.
        with objects.keeping_proof(object_id):
            return transport.add_if_new(name, path, link=True)
    return transport.add_if_new(name, objects.get_bytes(object_id))


def download(
    objects: BaseObjectStore,
    transport: Transport,
    plan: TransferPlan,
    object_id: str,
    size: int,
) -> bool:
    """Fetch one object into the local store, verified; True if this call stored it."""
    if objects.contains(object_id):
        return False
    doc = plan.docs.get(object_id)
    if doc is not None:
        data = doc.data  # verified when it was read during the walk
    elif size > SMALL_OBJECT and hasattr(objects, "add_downloaded"):
        return _download_large(objects, transport, object_id)
    else:
        try:
            # *size* is what the remote said a moment ago: read no more than it allows.
            data = transport.get_bytes_at_most(object_name(object_id), SMALL_OBJECT)
        except RemoteObjectTooLarge:
            if not hasattr(objects, "add_downloaded"):
                raise
            return _download_large(objects, transport, object_id)
        actual = digest_bytes(data)
        if actual != object_id:
            raise CorruptRemoteObject(object_id, actual, transport.url)
    objects.add_chunks((data,), len(data), expected_id=object_id)
    return True


def _download_large(objects: Any, transport: Transport, object_id: str) -> bool:
    """Stream a big object to ``tmp/``; the store hashes it and renames it into place.

    The rename adopts the downloaded file itself, so a big tensor is written to
    disk once, not copied a second time by the object store.
    """
    tmp_dir: Path = objects.tmp_dir
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f"pull-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        transport.get_file(object_name(object_id), tmp)
        try:
            return bool(objects.add_downloaded(tmp, object_id))
        except CorruptObject as exc:
            raise CorruptRemoteObject(object_id, exc.actual, transport.url) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
