"""Encoding values into content-addressed objects (and so hashing them).

The digest of a value is the id of its canonical encoding: a ``value``
document whose ``node`` describes the value, referring to blobs for bulk bytes
and to other value documents for large, separately cacheable parts. One
:class:`Encoder` serves both hashing (a :class:`HashSink` computes ids and
keeps what it would write, for a later :meth:`HashSink.flush`) and storing (a
:class:`StoreSink` writes as it goes, children before parents, so a present
document implies its children are present).

``docs/format.md`` specifies every node; keep the two in step.
"""

from __future__ import annotations

import copyreg
import functools
import importlib
import math
import sys
import types
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EncodeError
from ..odb.objects import (
    KIND_VALUE,
    Doc,
    Links,
    canonical_json,
    digest_bytes,
    fits_json_int,
    new_hasher,
)
from ..odb.packs import PACK_BLOB_MAX, PACK_MAX_BYTES
from . import order as orders_annex
from . import scalar_args
from .codecs import Codec, CodecRegistry, registry
from .hashcache import HashCache, LineageCache, digest_cache, lineage_cache
from .salted import without_salted

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore
    from ..odb.packs import PackWriter

Buffer = bytes | bytearray | memoryview
Producer = Callable[[], Iterable[Buffer]]

# bytes/str of at least this size become a blob of their own instead of inline text.
INLINE_BYTES_MAX = 64 << 10
_INLINE_STR_MAX = 1 << 20
# A tuple or frozenset of at least this many nodes, met again in the same document, is
# written as a reference to its first node (see Encoder._shared_immutable).
SHARED_IMMUTABLE_NODES = 32

_IMMUTABLE_ATOMS = (type(None), bool, int, float, str)
_CODE_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    type,
)


class Sink(ABC):
    """Where encoded objects go."""

    @abstractmethod
    def put_doc(self, doc: Doc) -> str: ...

    @abstractmethod
    def put_blob(
        self,
        produce: Producer,
        size: int,
        known_id: str = "",
        packable: bool = False,
        hint: str = "",
    ) -> str:
        """Store a blob; *packable* blobs (small, read whole or mapped as one value's
        part, see packs.py) may share a pack file with the rest of the value's.

        *known_id* is trusted; *hint* is an id the bytes probably have (a cached
        digest): a store checks it by hashing the bytes before relying on it.
        """

    @abstractmethod
    def require(self, object_id: str, obj: Any) -> None:
        """Note that document *object_id* (from the hash cache) encodes *obj*."""


class HashSink(Sink):
    """Computes ids without writing; keeps what a later flush needs.

    Documents are kept in encoding order (children first). Blobs are kept as
    their producers, so bulk bytes are never copied.
    """

    def __init__(self) -> None:
        self.docs: dict[str, Doc] = {}
        self.blobs: dict[str, tuple[Producer, int, bool]] = {}
        self.required: dict[str, Any] = {}

    def put_doc(self, doc: Doc) -> str:
        self.docs.setdefault(doc.id, doc)
        return doc.id

    def put_blob(
        self,
        produce: Producer,
        size: int,
        known_id: str = "",
        packable: bool = False,
        hint: str = "",
    ) -> str:
        blob_id = known_id or _hash_chunks(produce(), size)
        self.blobs.setdefault(blob_id, (produce, size, packable))
        return blob_id

    def require(self, object_id: str, obj: Any) -> None:
        self.required.setdefault(object_id, obj)

    def flush(self, objects: BaseObjectStore) -> None:
        """Write everything this sink saw into *objects* (blobs, then documents).

        A blob whose source changed since it was hashed raises CorruptObject and
        is not stored: the caller's record would otherwise point at other bytes.
        """
        for object_id, obj in self.required.items():
            if not objects.freshen(object_id):
                Encoder(StoreSink(objects)).encode_value(obj)
        sink = StoreSink(objects)
        try:
            for blob_id, (produce, size, packable) in self.blobs.items():
                sink.put_blob(produce, size, blob_id, packable)
            sink.finish()
        finally:
            sink.abort()
        for doc in self.docs.values():
            objects.add_doc(doc)


class StoreSink(Sink):
    """Writes each object into an object database as soon as it is encoded.

    Packable blobs are gathered in one pack, put in place before the next
    document is written: a document is only ever written after every object it
    links. :meth:`abort` drops a pack left unfinished by a failed encoding.
    """

    def __init__(self, objects: BaseObjectStore) -> None:
        self.objects = objects
        self._pack: PackWriter | None = None

    def put_doc(self, doc: Doc) -> str:
        self.finish()
        return self.objects.add_doc(doc)

    def put_blob(
        self,
        produce: Producer,
        size: int,
        known_id: str = "",
        packable: bool = False,
        hint: str = "",
    ) -> str:
        if hint and not known_id and self.objects.contains(hint):
            # Probably stored already (the digest cache says so): prove it from the
            # bytes before relying on it, which costs a hash and saves a write.
            actual = _hash_chunks(produce(), size)
            if actual == hint and self.objects.freshen(hint):
                return hint
            known_id = actual
        if packable and size <= PACK_BLOB_MAX:
            if self._pack is None:
                self._pack = self.objects.new_pack()
            if self._pack is not None:
                blob_id = self._pack.add(produce(), size, known_id)
                if self._pack.size >= PACK_MAX_BYTES:
                    self.finish()  # a big value goes into several packs
                return blob_id
        return self.objects.add_chunks(produce(), size, expected_id=known_id)

    def require(self, object_id: str, obj: Any) -> None:
        if not self.objects.freshen(object_id):
            # The cache knew the id but this store lacks the object: encode for real.
            Encoder(self, cache=None).encode_value(obj)

    def finish(self) -> None:
        """Put the pending pack in place (durable, visible to readers)."""
        pack, self._pack = self._pack, None
        if pack is not None:
            try:
                pack.finish()
            except BaseException:
                pack.abort()
                raise

    def abort(self) -> None:
        pack, self._pack = self._pack, None
        if pack is not None:
            pack.abort()


def _hash_chunks(chunks: Iterable[Buffer], size: int) -> str:
    hasher = new_hasher(size)
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.hexdigest()


class _Frame:
    """State of the document being built: its links and its identity memo."""

    __slots__ = ("keepalive", "labels", "links", "memo", "orders", "scratch")

    def __init__(self) -> None:
        self.links = Links()
        # id(obj) -> the node emitted at its first occurrence
        self.memo: dict[int, Any] = {}
        self.labels = 0
        self.keepalive: list[Any] = []
        self.scratch: dict[Any, Any] = {}
        # id(items list) -> the order its items were met in, where not canonical
        self.orders: dict[int, list[int]] = {}


def _float_node(value: float) -> Any:
    if math.isfinite(value):
        return value
    return {"$": "float", "v": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def _int_node(value: int) -> Any:
    if not fits_json_int(value):
        # Hex, which Python converts at any size (decimal stops at 4300 digits by default).
        return {"$": "int", "hex": format(value, "x")}
    if not -_SMALL_INT_LIMIT < value < _SMALL_INT_LIMIT:
        limit = sys.get_int_max_str_digits()
        if limit and abs(value) >= _ten_to(limit):
            raise EncodeError(
                f"this process converts ints of at most {limit} digits to text "
                "(sys.set_int_max_str_digits or PYTHONINTMAXSTRDIGITS), and ints of up to "
                "4300 digits are stored as text: allow at least 4300 digits"
            )
    return value


# Python refuses int <-> decimal text conversion limits below this many digits.
_SMALL_INT_LIMIT = 10**640


@functools.lru_cache(maxsize=4)
def _ten_to(digits: int) -> int:
    return 10**digits


def _plain_scalars(items: list[Any]) -> list[Any] | None:
    """A copy of a long list of one scalar type that is its own node, else None.

    The node of a small int, a finite float, a short str, a bool or None is the
    object itself, so such a list's node is a copy of it: checked a type at a
    time in C (``map``, ``min``, ``sum``) instead of one ``node`` call per item,
    which is what keying a large plain list costs otherwise.
    """
    if len(items) < 64:
        return None
    kinds = set(map(type, items))
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    if kind is int:
        plain = min(items) > -_SMALL_INT_LIMIT and max(items) < _SMALL_INT_LIMIT
    elif kind is float:
        plain = math.isfinite(sum(items))  # a nan or an infinity makes the sum one too
    elif kind is str:
        plain = max(map(len, items)) <= _INLINE_STR_MAX
    else:
        plain = kind is bool or kind is type(None)
    return list(items) if plain else None


def _sort_key(node: Any) -> bytes:
    return canonical_json(node)


class Encoder:
    """Turns Python values into nodes and documents.

    Codecs call :meth:`node`, :meth:`ref`, :meth:`blob`, :meth:`cached_blob`
    and :meth:`code` while encoding; they must call them in the same order as
    their decoder reads the results back, so that shared references line up.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        cache: HashCache | None = digest_cache,
        lineage: LineageCache | None = lineage_cache,
        codecs: CodecRegistry = registry,
        verify: bool = False,
    ) -> None:
        self.sink = sink
        self.cache = cache
        # Storing: cached digests are hints the sink checks against the bytes, and
        # cached documents are encoded again (a result is stored from what it holds).
        self.verify = verify
        self.lineage = lineage
        self.codecs = codecs
        self.parents: set[str] = set()
        # code digest -> blob id of code stored by value (not part of any digest)
        self.payloads: dict[str, str] = {}
        self._frames: list[_Frame] = []
        self._unlabelled = 0  # >0 while encoding set elements and dict keys
        self._nodes = 0  # items of the tuples and frozensets encoded (a gauge of their size)
        # Storing keeps the order of dicts and sets beside their canonical encoding
        # (``order.py``): document id -> its order annex. Hashing needs none.
        self.keep_order = not isinstance(sink, HashSink)
        self.orders: dict[str, orders_annex.Annex] = {}

    # -- entry points ---------------------------------------------------------------
    def encode_value(self, obj: Any) -> str:
        """Encode *obj* as a value document; return its id (the value's digest)."""
        codec = self._codec_for(obj)
        if codec is not None and codec.standalone:
            return self._standalone(obj, codec)
        return self._document(lambda: self.node(obj))

    def encode_mapping(self, items: Sequence[tuple[str, Any]]) -> str:
        """Encode named values in the given order (a call's arguments)."""
        doc = scalar_args.document(items)
        if doc is not None:  # built once per process for the same small scalars
            return self.sink.put_doc(doc)

        def build() -> Any:
            out = []
            for name, value in items:
                try:
                    out.append([name, self.node(value)])
                except EncodeError as exc:
                    raise EncodeError(f"argument {name!r}: {exc}") from exc
            return {"$": "args", "items": out}

        return self._document(build)

    # -- API for codecs ----------------------------------------------------------------
    @property
    def scratch(self) -> dict[Any, Any]:
        """Scratch space local to the document being built (e.g. shared storages)."""
        return self._frames[-1].scratch

    def node(self, obj: Any) -> Any:
        """The inline node of *obj* within the current document."""
        cls = type(obj)
        if cls is str:
            if len(obj) > _INLINE_STR_MAX:
                data = obj.encode("utf-8")
                return {"$": "str", "blob": self.blob(lambda: (data,), len(data))}
            return obj
        if cls is int:
            return obj if -_SMALL_INT_LIMIT < obj < _SMALL_INT_LIMIT else _int_node(obj)
        if cls is bool or obj is None:
            return obj
        if cls is float:
            return _float_node(obj)
        if cls is tuple:
            return self._shared_immutable(obj, lambda: [self.node(x) for x in obj], "tuple")
        if cls is bytes:
            return self._bytes_node("bytes", obj)
        if cls is frozenset:
            return self._shared_immutable(obj, lambda: self._unordered(obj), "frozenset")
        if cls is complex:
            return {"$": "complex", "re": _float_node(obj.real), "im": _float_node(obj.imag)}
        if isinstance(obj, _CODE_TYPES):
            return self.code(obj)
        if cls is types.ModuleType:
            return {"$": "module", "name": obj.__name__}

        # Everything below may be shared or mutable: preserve identity within the doc.
        frame = self._frames[-1]
        seen = frame.memo.get(id(obj))
        if seen is not None:
            return self._same(frame, seen)

        if cls is list:
            plain = _plain_scalars(obj)
            out: list[Any] = [] if plain is None else plain
            self._remember(frame, obj, out)
            if plain is None:
                for x in obj:
                    out.append(self.node(x))
            return out
        if cls is dict or cls is OrderedDict:
            out_d: dict[str, Any] = {"$": "dict" if cls is dict else "odict"}
            self._remember(frame, obj, out_d)
            out_d["items"] = self._dict_items(obj.items(), ordered=cls is OrderedDict)
            return out_d
        if cls is set:
            out_s: dict[str, Any] = {"$": "set"}
            self._remember(frame, obj, out_s)
            out_s["items"] = self._unordered(obj)
            return out_s
        if cls is bytearray:
            out_b = self._bytes_node("bytearray", bytes(obj))
            self._remember(frame, obj, out_b)
            return out_b

        self._note_lineage(obj)
        codec = self._codec_for(obj)
        if codec is not None:
            if codec.standalone:
                ref = {"$": "ref", "id": self._standalone(obj, codec)}
                frame.links.docs.add(ref["id"])
                self._remember(frame, obj, ref)
                return ref
            out_c: dict[str, Any] = {"$": codec.tag}
            self._remember(frame, obj, out_c)
            out_c.update(codec.encode(obj, self))
            return out_c
        return self._reduce(obj, frame)

    def node_by_reduce(self, obj: Any) -> dict[str, Any]:
        """The node of *obj* through the pickle reduce protocol, bypassing its codec."""
        return self._reduce(obj, self._frames[-1])

    def ref(self, obj: Any) -> dict[str, Any]:
        """A reference to *obj* encoded as its own value document."""
        self._note_lineage(obj)
        doc_id = self.encode_value(obj)
        self._frames[-1].links.docs.add(doc_id)
        return {"$": "ref", "id": doc_id}

    def blob(
        self,
        produce: Producer,
        size: int,
        known_id: str = "",
        packable: bool = False,
        hint: str = "",
    ) -> str:
        """Store bytes as a blob (streamed from *produce*) and link it; return its id.

        *packable*: the blob may be stored in a pack with the value's other small
        blobs (see packs.py); readers then get it through the store, never as a
        file of its own (:meth:`BaseObjectStore.blob_path` is None for it).
        """
        if self.verify and known_id:
            hint, known_id = known_id, ""  # storing: an id a codec knows is only a hint
        blob_id = self.sink.put_blob(produce, size, known_id, packable, hint)
        self._frames[-1].links.blobs.add(blob_id)
        return blob_id

    def cached_blob(
        self,
        obj: Any,
        fingerprint: Hashable | None,
        produce: Producer,
        size: int,
        packable: bool = False,
    ) -> str:
        """Like :meth:`blob`, reusing the digest cached for *obj* while its fingerprint holds."""
        known = ""
        if self.cache is not None and fingerprint is not None:
            known = self.cache.get(obj, fingerprint) or ""
        if self.verify:
            blob_id = self.blob(produce, size, "", packable, hint=known)
        else:
            blob_id = self.blob(produce, size, known, packable)
        if self.cache is not None and fingerprint is not None and blob_id != known:
            self.cache.put(obj, fingerprint, blob_id)
        return blob_id

    def code(self, obj: Any) -> dict[str, Any]:
        """A digest-pinned reference to a function or class (see ``docs/format.md``)."""
        from .code_refs import encode_code_ref

        return encode_code_ref(obj, self)

    # -- internals ---------------------------------------------------------------------
    def _document(self, build: Callable[[], Any]) -> str:
        frame = _Frame()
        self._frames.append(frame)
        try:
            node = build()
        except RecursionError:
            raise EncodeError(
                "value is nested too deeply to encode; store a flatter structure"
            ) from None
        finally:
            self._frames.pop()
        doc_id = self.sink.put_doc(Doc(KIND_VALUE, {"node": node}, frame.links))
        if frame.orders:
            self.orders.setdefault(doc_id, orders_annex.annex(node, frame.orders))
        return doc_id

    def order_annex(self) -> str:
        """Store the order annex of every document encoded (``order.py``); its blob id,
        or "" when every dict and set was met in canonical order."""
        if not self.orders:
            return ""
        data = orders_annex.encode(self.orders)
        return self.sink.put_blob(lambda: (data,), len(data))

    def _standalone(self, obj: Any, codec: Codec) -> str:
        fingerprint = None
        if self.cache is not None:
            if not self.verify:
                cached = self.cache.get_if(obj, lambda old: codec.fingerprint_holds(obj, old))
                if cached is not None:
                    self.sink.require(cached, obj)
                    return cached
            fingerprint = codec.fingerprint(obj)

        def build() -> Any:
            out: dict[str, Any] = {"$": codec.tag}
            out.update(codec.encode(obj, self))
            return out

        doc_id = self._document(build)
        if fingerprint is not None:
            self.cache.put(obj, fingerprint, doc_id)  # type: ignore[union-attr]
        return doc_id

    def _codec_for(self, obj: Any) -> Codec | None:
        cls = type(obj)
        if cls in _BUILTIN_TYPES:
            return None
        return self.codecs.for_type(cls)

    def _shared_immutable(self, obj: Any, items: Callable[[], list[Any]], tag: str) -> Any:
        """The node of a tuple or frozenset: a reference back if it is large and met again.

        Shared immutable structure is encoded once per document, so the walk
        costs what the distinct objects cost (40 nested tuples each holding the
        one before twice: 80 nodes, not 2**40). Only tuples of at least
        SHARED_IMMUTABLE_NODES nodes are referenced back: a small one (every
        literal) is written out wherever it stands, as it always was, so its
        digest does not depend on whether two equal small tuples are one object.
        It is remembered after its items (a tuple cannot be restored before
        them), and never inside a set element or dict key (their order is
        their encodings' order, which labels would change).
        """
        frame = self._frames[-1]
        seen = None if self._unlabelled else frame.memo.get(id(obj))
        if seen is not None:
            return self._same(frame, seen)
        before = self._nodes
        node = {"$": tag, "items": items()}
        self._nodes += 1 + len(node["items"])
        if self._nodes - before >= SHARED_IMMUTABLE_NODES and id(obj) not in frame.memo:
            self._remember(frame, obj, node)
        return node

    def _remember(self, frame: _Frame, obj: Any, node: Any) -> None:
        if self._unlabelled:
            return
        frame.memo[id(obj)] = node
        frame.keepalive.append(obj)

    def _same(self, frame: _Frame, first: Any) -> dict[str, Any]:
        """Refer back to an object already in this document, labelling its first node."""
        if isinstance(first, list):
            if first and isinstance(first[0], dict) and first[0].get("$") == "label":
                label = first[0]["k"]
            else:
                label = frame.labels
                frame.labels += 1
                first.insert(0, {"$": "label", "k": label})
        else:
            label = first.get("&")
            if label is None:
                label = frame.labels
                frame.labels += 1
                first["&"] = label
        return {"$": "same", "k": label}

    def _bytes_node(self, tag: str, data: bytes) -> dict[str, Any]:
        if len(data) >= INLINE_BYTES_MAX:
            return {"$": tag, "blob": self.blob(lambda: (data,), len(data))}
        return {"$": tag, "hex": data.hex()}

    def _unordered(self, items: Iterable[Any]) -> list[Any]:
        self._unlabelled += 1
        try:
            nodes = [self.node(x) for x in items]
        finally:
            self._unlabelled -= 1
        ranks, order = orders_annex.order_of([_sort_key(n) for n in nodes])
        return self._in_order([nodes[i] for i in ranks], order)

    def _in_order(self, items: list[Any], order: list[int] | None) -> list[Any]:
        """*items*, canonical; the order they were met in is noted for the annex."""
        if order is not None and self.keep_order:
            self._frames[-1].orders[id(items)] = order
        return items

    def _dict_items(self, items: Iterable[tuple[Any, Any]], ordered: bool) -> list[list[Any]]:
        self._unlabelled += 1
        try:
            keyed = [(self.node(k), v) for k, v in items]
        finally:
            self._unlabelled -= 1
        order = None
        if not ordered:
            # As == compares dicts: insertion order does not matter (it is kept in
            # the annex). Keys are unique, so their encodings are too (a total order).
            ranks, order = orders_annex.order_of([_sort_key(k) for k, _ in keyed])
            keyed = [keyed[i] for i in ranks]
        return self._in_order([[k, self.node(v)] for k, v in keyed], order)

    def _note_lineage(self, obj: Any) -> None:
        if self.lineage is not None:
            parent = self.lineage.get(obj)
            if parent is not None:
                self.parents.add(parent)

    def _reduce(self, obj: Any, frame: _Frame) -> dict[str, Any]:
        """Encode any picklable object through the pickle reduce protocol."""
        cls = type(obj)
        try:
            reducer = copyreg.dispatch_table.get(cls)
            rv = reducer(obj) if reducer is not None else obj.__reduce_ex__(4)
        except Exception as exc:
            raise EncodeError(_unencodable_message(obj, exc)) from exc
        if isinstance(rv, str):
            module = getattr(obj, "__module__", None) or _whichmodule(obj)
            return self.code_by_name(module, rv)
        if not isinstance(rv, tuple) or not 2 <= len(rv) <= 6:
            raise EncodeError(f"{cls.__qualname__}.__reduce_ex__ returned {rv!r}")
        fn, args, state, listitems, dictitems, setstate = (*rv, None, None, None, None)[:6]
        node: dict[str, Any] = {}
        self._remember(frame, obj, node)
        if fn is copyreg.__newobj__ and args and isinstance(args[0], type):
            node["$"] = "object"
            node["cls"] = self.code(args[0])
            node["args"] = [self.node(a) for a in args[1:]]
        else:
            node["$"] = "reduce"
            node["fn"] = self.node(fn)
            node["args"] = [self.node(a) for a in args]
        # Items before state, in the order pickle restores them (and the decoder
        # reads them), so that shared references are labelled consistently.
        if listitems is not None:
            node["listitems"] = [self.node(x) for x in listitems]
        if dictitems is not None:
            node["dictitems"] = self._dict_items(dictitems, ordered=False)
        if state is not None:
            node["state"] = self.node(without_salted(cls, state))
        if setstate is not None:
            node["setstate"] = self.node(setstate)
        return node

    def code_by_name(self, module: str, qualname: str) -> dict[str, Any]:
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise EncodeError(f"cannot find global {module}.{qualname}: {exc}") from exc
        return self.code(obj)


_BUILTIN_TYPES = frozenset(
    {type(None), bool, int, float, str, bytes, bytearray, tuple, list, dict, set, frozenset}
)


def _whichmodule(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "")
    for module_name, module in list(sys.modules.items()):
        if module is not None and getattr(module, name, None) is obj:
            return module_name
    return "__main__"


def _unencodable_message(obj: Any, exc: BaseException) -> str:
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}"
    return (
        f"cannot encode a {name} object ({exc}). Open files, locks, generators and "
        "sockets cannot be stored or hashed: return or pass something that pickles, "
        f"register a codec for {cls.__qualname__}, or leave the argument out of the key "
        "with @memo(ignore=(...))"
    )


def digest_of_doc_node(node: Any) -> str:
    """The id a value document holding *node* (and no links) would have."""
    return Doc(KIND_VALUE, {"node": node}).id


__all__ = [
    "INLINE_BYTES_MAX",
    "Encoder",
    "HashSink",
    "Sink",
    "StoreSink",
    "digest_bytes",
    "digest_of_doc_node",
]
