"""The object database contract: what every store of objects keyed by BLAKE3 id does.

Implementations (``object_store.py``: on disk and in memory) provide a few raw
primitives; digest checking, the document cache and the checked operations live
here, so that every backend behaves the same. All objects are written once and
never modified; every read of a whole object re-checks its digest.
"""

from __future__ import annotations

import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import CorruptObject, ObjectNotFound
from .objects import Doc, digest_bytes, is_object_id
from .packs import PackLocation, PackWriter
from .verified import Stamp, hash_mapped

Buffer = bytes | bytearray | memoryview

# Documents up to this size are kept in a per-process cache after a read. They
# are immutable by construction (an id names one content forever), so the cache
# can never serve a stale answer.
_DOC_CACHE_MAX_BYTES = 256 << 10
_DOC_CACHE_ENTRIES = 4096


def _check_id(object_id: str) -> None:
    if not is_object_id(object_id):
        raise ValueError(f"not an object id: {object_id!r}")


class BaseObjectStore(ABC):
    """The contract every object database keeps.

    Implementations provide the raw primitives; digest checking and the document
    cache live here so that every backend behaves the same.
    """

    def __init__(self) -> None:
        self._doc_cache: OrderedDict[str, Doc] = OrderedDict()
        self._doc_cache_lock = threading.Lock()

    # -- primitives -----------------------------------------------------------------
    @abstractmethod
    def contains(self, object_id: str) -> bool:
        """True if an object with this id is present (its bytes are not checked)."""

    @abstractmethod
    def _read_raw(self, object_id: str) -> bytes:
        """The stored bytes, unchecked; ObjectNotFound if absent."""

    @abstractmethod
    def _write_new(self, object_id: str, chunks: Iterable[Buffer], size: int) -> str:
        """Store *chunks* under their digest unless present; return the digest.

        *object_id* is the expected id or "" when unknown. Implementations hash
        while they write and must not leave a partial object behind on failure.
        """

    @abstractmethod
    def iter_ids(self) -> Iterator[str]:
        """Every object id present, in no particular order."""

    @abstractmethod
    def delete(self, object_id: str) -> None:
        """Remove an object if present (used by gc only)."""

    @abstractmethod
    def size_of(self, object_id: str) -> int:
        """Stored size in bytes; ObjectNotFound if absent."""

    @abstractmethod
    def quarantine(self, object_id: str) -> None:
        """Move a damaged object out of the way so that a rewrite can repair it."""

    def sync(self, also: int | None = None) -> None:
        """Make every object written so far durable, and the file open as *also*.

        In memory there is nothing to do but the fsync of *also*.
        """
        if also is not None:
            os.fsync(also)

    def freshen(self, object_id: str) -> bool:
        """True if the object is present; on disk, also refresh its modification time.

        gc frees unreachable objects older than its grace period. A writer that
        reuses an object already present instead of writing it again freshens it,
        so that gc spares it as it spares new objects until the writer's ref is
        published (the object may be old garbage that only this writer needs).
        """
        return self.contains(object_id)

    # -- checked operations ------------------------------------------------------------
    def add_bytes(self, data: Buffer) -> str:
        """Store *data* if new and return its id (written once, atomically)."""
        return self._write_new("", (data,), len(data))

    def add_chunks(self, chunks: Iterable[Buffer], size: int, expected_id: str = "") -> str:
        """Store the concatenation of *chunks*, streamed, and return its id.

        With *expected_id* known and already present, nothing is read or written.
        If the bytes do not hash to *expected_id* the object is not stored and
        :class:`CorruptObject` is raised.
        """
        if expected_id and self.freshen(expected_id):
            return expected_id
        return self._write_new(expected_id, chunks, size)

    def add_doc(self, doc: Doc) -> str:
        """Store a document if new; return its id."""
        object_id = doc.id
        # Not the document cache: another process's gc may have freed the file since.
        if self.freshen(object_id):
            return object_id
        self._write_new(object_id, (doc.data,), len(doc.data))
        return object_id

    def read_unchecked(self, object_id: str) -> bytes:
        """The stored bytes without the digest check or quarantine (for fsck's report)."""
        return self._read_raw(object_id)

    def get_bytes(self, object_id: str) -> bytes:
        """The object's bytes, re-checked against its id."""
        _check_id(object_id)
        data = self._read_raw(object_id)
        actual = digest_bytes(data)
        if actual != object_id:
            self.quarantine(object_id)
            raise CorruptObject(object_id, actual, self._describe(object_id))
        return data

    def get_bytearray(self, object_id: str) -> bytearray:
        """The object's bytes in a fresh, writable buffer, re-checked against its id."""
        _check_id(object_id)
        data = self._read_raw_into_bytearray(object_id)
        actual = digest_bytes(data)
        if actual != object_id:
            self.quarantine(object_id)
            raise CorruptObject(object_id, actual, self._describe(object_id))
        return data

    def _read_raw_into_bytearray(self, object_id: str) -> bytearray:
        return bytearray(self._read_raw(object_id))

    def get_doc(self, object_id: str) -> Doc:
        """A parsed document, from the per-process cache when possible."""
        doc = self._doc_cache.get(object_id)
        if doc is not None:
            return doc
        data = self.get_bytes(object_id)
        doc = Doc.parse(data, object_id)
        if len(data) <= _DOC_CACHE_MAX_BYTES:
            with self._doc_cache_lock:
                self._doc_cache[object_id] = doc
                if len(self._doc_cache) > _DOC_CACHE_ENTRIES:
                    self._doc_cache.popitem(last=False)
        return doc

    def verify(self, object_id: str) -> str | None:
        """Check one object in full; return None if sound, else a reason."""
        try:
            data = self._read_raw(object_id)
        except ObjectNotFound:
            return "missing"
        actual = digest_bytes(data)
        if actual != object_id:
            return f"digest mismatch: bytes hash to {actual}"
        return None

    def blob_path(self, object_id: str) -> Path | None:
        """A file holding the object, for memory mapping; None when not on disk."""
        return None

    def blob_file(self, object_id: str) -> str | None:
        """Where the object's file would be, unchecked (a fast path for readers
        that open it and handle FileNotFoundError); None without files."""
        return None

    def new_pack(self) -> PackWriter | None:
        """A writer of one pack of small blobs (see packs.py); None where packs are not kept."""
        return None

    def pack_location(self, object_id: str, refresh: bool = True) -> PackLocation | None:
        """Where a packed object's bytes are; None if it is not packed (or not here)."""
        return None

    def prove_mapped(
        self,
        object_id: str,
        data: Callable[[], Buffer],
        path: str,
        stamp: Stamp,
        packed: bool = False,
        always: bool = False,
    ) -> bool:
        """Prove that bytes mapped from a file of this store are the object's, before use.

        *data* gives the mapped bytes (called only when they must be hashed);
        *path* is the file they were mapped from (the object's own, or its pack
        when *packed*) and *stamp* its stat's :func:`~memostore.odb.verified.stamp_of`,
        taken before and after mapping (equal). Returns False when the file
        changed while it was being proven (read the object another way); raises
        :class:`CorruptObject` when the bytes do not hash to the id (the object is
        quarantined first). With *always*, hashes even what the record vouches for.
        """
        actual = hash_mapped(data())
        if actual != object_id:
            self.quarantine(object_id)
            raise CorruptObject(object_id, actual, path)
        return True

    def proven_pack_members(self, path: str, stamp: Stamp) -> frozenset[str]:
        """The members of the pack file at *path* proven while it has *stamp* (``"*"``:
        all of them), so a reader of many members asks once; empty where not recorded."""
        return frozenset()

    def forget_verified(self, object_id: str) -> None:  # noqa: B027 - nothing recorded in memory
        """Drop any record that the object's file was proven (fsck found it damaged)."""

    def keeping_proof(self, object_id: str) -> contextlib.AbstractContextManager[None]:
        """Around a metadata change this process makes to the object's file (a hard
        link): its proof stays valid after. A no-op where objects are not files."""
        return contextlib.nullcontext()

    def _describe(self, object_id: str) -> str | None:
        path = self.blob_path(object_id)
        if path is None and (loc := self.pack_location(object_id)) is not None:
            return f"{loc.pack.path} at byte {loc.offset}"
        return str(path) if path else None

    def forget_cached(self, object_id: str) -> None:
        with self._doc_cache_lock:
            self._doc_cache.pop(object_id, None)
