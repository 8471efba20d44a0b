"""Objects: values that compute their own id and serialise themselves.

Two shapes of object live in the object database (``docs/format.md`` is the
specification):

* a **blob** is raw bytes, stored as they are so that a tensor's blob (a
  safetensors file) can be memory-mapped;
* a **document** is one header line ``memostore:<kind>:<version>\\n`` followed
  by canonical JSON. Its ``links`` member lists every object it refers to, so
  reachability (gc, push, pull, fsck) never needs to understand a kind.

An object's id is the BLAKE3 digest (hex) of its exact bytes, whatever its kind.
Nothing in this module performs I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import blake3

from ..errors import EncodeError, MalformedObject

FORMAT_VERSION = 1
ID_HEX_LENGTH = 64
_HEX_DIGITS = "0123456789abcdef"
DOC_PREFIX = b"memostore:"

# Document kinds; a blob has no kind line.
KIND_VALUE = "value"
KIND_TREE = "tree"
KIND_CODE = "code"
KIND_EVALUATION = "evaluation"
KIND_LOGS = "logs"
DOC_KINDS = frozenset({KIND_VALUE, KIND_TREE, KIND_CODE, KIND_EVALUATION, KIND_LOGS})

# From this size hashing runs on all cores: blake3 keeps its threads, so even 1 MiB
# hashes about twice as fast on 2 cores (0.07 ms against 0.12 ms). Below it a call
# saves a few microseconds at most and leaves the other cores to other work.
_PARALLEL_HASH_THRESHOLD = 1 << 20


def digest_bytes(data: bytes | bytearray | memoryview) -> str:
    """The BLAKE3 hex digest of *data* (an object id when *data* is an object's bytes)."""
    if len(data) >= _PARALLEL_HASH_THRESHOLD:
        return blake3.blake3(data, max_threads=blake3.blake3.AUTO).hexdigest()
    return blake3.blake3(data).hexdigest()


def hash_parts(parts: Iterable[str]) -> str:
    """BLAKE3 of length-prefixed strings (no two part lists hash alike by concatenation)."""
    h = blake3.blake3()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(b"%d:" % len(data))
        h.update(data)
    return h.hexdigest()


def new_hasher(expected_size: int = 0) -> blake3.blake3:
    """A streaming BLAKE3 hasher, multi-threaded when the input will be large."""
    if expected_size >= _PARALLEL_HASH_THRESHOLD:
        return blake3.blake3(max_threads=blake3.blake3.AUTO)
    return blake3.blake3()


def is_object_id(text: str) -> bool:
    """True when *text* is a well-formed object id (64 lowercase hex digits)."""
    # Not int(text, 16): it also takes whitespace, "_" and a sign ("-" + 63 hex digits,
    # or 63 and a newline, would pass and then name a path).
    return isinstance(text, str) and len(text) == ID_HEX_LENGTH and not text.strip(_HEX_DIGITS)


# Ints of at most 4300 decimal digits (Python's default limit on converting ints to
# and from decimal text) are JSON numbers in documents; bigger ones are stored as hex.
JSON_INT_LIMIT = 10**4300


def fits_json_int(value: int) -> bool:
    """True when *value* is stored as a JSON number (at most 4300 decimal digits)."""
    return -JSON_INT_LIMIT < value < JSON_INT_LIMIT


def _reject_non_finite(obj: Any) -> Any:
    raise ValueError(f"cannot encode {obj!r} in canonical JSON")


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8, finite floats only.

    Python's ``float.__repr__`` is the shortest round-tripping form and the same
    on every platform, so equal values always give equal bytes.
    """
    text = json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_reject_non_finite,
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(
            f"a string holds {text[exc.start : exc.end]!r}, a lone surrogate that UTF-8 "
            "cannot encode; pass valid text (for example "
            "s.encode('utf-8', 'surrogatepass').decode('utf-8', 'replace')) or bytes instead"
        ) from None


def check_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


@dataclass
class Links:
    """The set of objects a document refers to, split by shape."""

    docs: set[str] = field(default_factory=set)
    blobs: set[str] = field(default_factory=set)

    def update(self, other: Links) -> None:
        self.docs |= other.docs
        self.blobs |= other.blobs

    def to_json(self) -> dict[str, list[str]]:
        return {"blob": sorted(self.blobs), "doc": sorted(self.docs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Iterable[str]] | None) -> Links:
        if not data:
            return cls()
        return cls(docs=set(data.get("doc", ())), blobs=set(data.get("blob", ())))


class Doc:
    """A structured object: a kind, a JSON body and the links it holds.

    The id is computed from the encoding, once, on first use.
    """

    __slots__ = ("_data", "_id", "body", "kind", "links")

    def __init__(self, kind: str, body: dict[str, Any], links: Links | None = None) -> None:
        if kind not in DOC_KINDS:
            raise ValueError(f"unknown document kind {kind!r}")
        if "links" in body:
            raise ValueError("'links' is reserved in a document body")
        self.kind = kind
        self.body = body
        self.links = links if links is not None else Links()
        self._data: bytes | None = None
        self._id: str | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            payload = dict(self.body)
            payload["links"] = self.links.to_json()
            header = DOC_PREFIX + f"{self.kind}:{FORMAT_VERSION}\n".encode("ascii")
            self._data = header + canonical_json(payload)
        return self._data

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = digest_bytes(self.data)
        return self._id

    @classmethod
    def parse(cls, data: bytes, object_id: str | None = None) -> Doc:
        """Parse a document's bytes (already verified against its id by the store)."""
        newline = data.find(b"\n")
        if not data.startswith(DOC_PREFIX) or newline < 0:
            raise MalformedObject(f"object {object_id or '?'} is not a memostore document")
        try:
            _, kind, version = data[:newline].decode("ascii").split(":")
            if int(version) > FORMAT_VERSION:
                raise MalformedObject(
                    f"object {object_id} uses format version {version}; "
                    "upgrade memostore to read it"
                )
            payload = json.loads(data[newline + 1 :])
            if not isinstance(payload, dict):
                raise MalformedObject(f"object {object_id or '?'} is not a JSON object")
            links = _parse_links(payload.pop("links", None), object_id)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            if isinstance(exc, MalformedObject):
                raise
            raise MalformedObject(f"object {object_id or '?'} is malformed: {exc}") from exc
        if kind not in DOC_KINDS:
            raise MalformedObject(
                f"object {object_id or '?'} is of unknown kind {kind[:40]!r}; upgrade memostore"
            )
        doc = cls(kind, payload, links)
        doc._data = bytes(data)
        doc._id = object_id
        return doc


def _parse_links(data: Any, object_id: str | None) -> Links:
    """The ``links`` member of a document read from bytes, checked for shape."""
    if not data:
        return Links()
    lists = (data.get("doc", []), data.get("blob", [])) if isinstance(data, dict) else None
    if lists is None or not all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in lists
    ):
        raise MalformedObject(f"object {object_id or '?'} has malformed links")
    return Links(docs=set(lists[0]), blobs=set(lists[1]))


def is_doc_bytes(data: bytes) -> bool:
    """True when *data* begins like a document (blobs are told apart by the link lists)."""
    return data.startswith(DOC_PREFIX)
