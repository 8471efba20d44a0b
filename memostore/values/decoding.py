"""Restoring values from their content-addressed encoding.

Every decode builds fresh objects, so a caller's mutation of a restored value
never reaches the store or the next hit. Within one document, shared
references come back shared (``same`` nodes); across documents, codecs link
objects through :attr:`Decoder.session` and :meth:`Decoder.after`.

A stored value is data: every function, class and module it names goes
through one gate (``memostore/trust/gate.py``: :meth:`Decoder.code` for code
references, :func:`_module` for modules), and a document that does not decode,
whatever the reason, raises :class:`DecodeError` (a miss for a memo hit).
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DecodeError, MalformedObject, MemostoreError
from ..odb.objects import KIND_VALUE
from .codecs import CodecRegistry, registry

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore
    from ..trust.gate import TrustContext


_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
# An int too big for a JSON number: hex digits, "-" first when negative.
_HEX_INT = re.compile(r"-?[0-9a-f]+")


class _Frame:
    __slots__ = ("labels", "scratch")

    def __init__(self) -> None:
        self.labels: dict[int, Any] = {}
        self.scratch: dict[Any, Any] = {}


class Decoder:
    """Rebuilds objects from value documents in one object database.

    Attributes:
        payloads: code digest -> blob id of code stored by value (from the evaluation).
        session: state shared by every document of this decode (for codecs).
        restored: (object, document id) for each document decoded, so the caller
            can enter restored objects into the hash cache without re-hashing.
    """

    def __init__(
        self,
        objects: BaseObjectStore,
        payloads: dict[str, str] | None = None,
        codecs: CodecRegistry = registry,
    ) -> None:
        self.objects = objects
        self.payloads = payloads or {}
        self.codecs = codecs
        self.session: dict[Any, Any] = {}
        self.restored: list[tuple[Any, str]] = []
        self._frames: list[_Frame] = []
        self._after: list[Callable[[], None]] = []
        self._trust: TrustContext | None = None

    # -- entry points ----------------------------------------------------------------
    def decode_value(self, doc_id: str) -> Any:
        """The value a value document encodes, as fresh objects."""
        if self._frames:
            return self._decode_doc(doc_id)
        with _as_decode_error(doc_id):
            obj = self._decode_doc(doc_id)
            while self._after:
                self._after.pop(0)()
        return obj

    def decode_mapping(self, doc_id: str) -> list[tuple[str, Any]]:
        """The (name, value) pairs of an arguments document."""
        node = self._doc_node(doc_id)
        if not isinstance(node, dict) or node.get("$") != "args":
            raise MalformedObject(f"object {doc_id} is not an arguments document")
        self._frames.append(_Frame())
        try:
            with _as_decode_error(doc_id):
                return [(name, self.node(value)) for name, value in node["items"]]
        finally:
            self._frames.pop()

    @property
    def trust(self) -> TrustContext:
        """What the trust gate knows of this decoder's store."""
        if self._trust is None:
            from ..trust.gate import TrustContext

            self._trust = TrustContext(self.objects)
        return self._trust

    # -- API for codecs ------------------------------------------------------------------
    @property
    def scratch(self) -> dict[Any, Any]:
        """Scratch space local to the document being decoded."""
        return self._frames[-1].scratch

    def after(self, fn: Callable[[], None]) -> None:
        """Run *fn* once the whole value is decoded (to link objects across documents)."""
        self._after.append(fn)

    def blob_bytes(self, blob_id: str) -> bytes:
        """A blob's bytes, checked against its id."""
        return self.objects.get_bytes(blob_id)

    def blob_path(self, blob_id: str) -> Path | None:
        """A file holding the blob (for memory mapping), or None if not on disk."""
        return self.objects.blob_path(blob_id)

    def blob_file(self, blob_id: str) -> str | None:
        """Where a blob's file is, unchecked (open it and handle FileNotFoundError)."""
        return self.objects.blob_file(blob_id)

    def node(self, node: Any) -> Any:
        """Decode one node of the current document."""
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            out: list[Any] = []
            items = node
            if node and isinstance(node[0], dict) and node[0].get("$") == "label":
                self._frames[-1].labels[node[0]["k"]] = out
                items = node[1:]
            for item in items:
                out.append(self.node(item))
            return out
        tag = node["$"]
        handler = _HANDLERS.get(tag)
        if handler is not None:
            obj = handler(self, node)
        else:
            codec = self.codecs.for_tag(tag)
            if codec is None:
                raise DecodeError(
                    f"no codec for {tag!r}: install the package that stores it "
                    f"(for torch values: pip install 'memostore[torch]')"
                )
            obj = codec.decode(node, self)
        self._label(node, obj)
        return obj

    def code(self, node: dict[str, Any], instantiate: bool = True) -> Any:
        """The function or class a code node names, through the trust gate.

        *instantiate*: the class is only made by ``__new__`` and given its stored
        state (``object`` nodes, codecs), never called with stored arguments, so a
        library class that runs none of its own code to be restored may be used
        (``trust/gate.py``). A code node standing as a value, or as the function of
        a ``reduce`` node, is decoded with ``instantiate=False``.
        """
        from .code_refs import decode_code_ref

        return decode_code_ref(node, self, instantiate)

    # -- internals -------------------------------------------------------------------
    def _doc_node(self, doc_id: str) -> Any:
        doc = self.objects.get_doc(doc_id)
        if doc.kind != KIND_VALUE:
            raise MalformedObject(f"object {doc_id} is a {doc.kind}, not a value")
        return doc.body["node"]

    def _decode_doc(self, doc_id: str) -> Any:
        node = self._doc_node(doc_id)
        self._frames.append(_Frame())
        try:
            obj = self.node(node)
        finally:
            self._frames.pop()
        self.restored.append((obj, doc_id))
        return obj

    def _label(self, node: dict[str, Any], obj: Any) -> None:
        label = node.get("&")
        if label is not None:
            self._frames[-1].labels.setdefault(label, obj)


def _same(dec: Decoder, node: dict[str, Any]) -> Any:
    try:
        return dec._frames[-1].labels[node["k"]]
    except KeyError:
        raise MalformedObject(f"reference to unknown label {node['k']}") from None


def _float(dec: Decoder, node: dict[str, Any]) -> float:
    return _FLOATS[node["v"]]


def _int(dec: Decoder, node: dict[str, Any]) -> int:
    digits = node.get("hex")
    if not isinstance(digits, str) or not _HEX_INT.fullmatch(digits):
        raise MalformedObject(f"malformed int node {str(digits)[:40]!r}")
    return int(digits, 16)


def _bytes(dec: Decoder, node: dict[str, Any]) -> bytes:
    if "blob" in node:
        return dec.blob_bytes(node["blob"])
    return bytes.fromhex(node["hex"])


def _str(dec: Decoder, node: dict[str, Any]) -> str:
    return dec.blob_bytes(node["blob"]).decode("utf-8")


def _dict(dec: Decoder, node: dict[str, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {} if node["$"] == "dict" else OrderedDict()
    dec._label(node, out)
    for key, value in node["items"]:
        out[dec.node(key)] = dec.node(value)
    return out


def _set(dec: Decoder, node: dict[str, Any]) -> set[Any]:
    out: set[Any] = set()
    dec._label(node, out)
    out.update(dec.node(x) for x in node["items"])
    return out


def _object(dec: Decoder, node: dict[str, Any]) -> Any:
    cls = dec.code(node["cls"])
    if not isinstance(cls, type):
        raise MalformedObject(f"an object node names {cls!r}, which is not a class")
    args = [dec.node(a) for a in node["args"]]
    obj = cls.__new__(cls, *args)
    dec._label(node, obj)
    _apply_state(dec, node, obj)
    return obj


def _reduce(dec: Decoder, node: dict[str, Any]) -> Any:
    fn = dec.node(node["fn"])
    args = [dec.node(a) for a in node["args"]]
    try:
        obj = fn(*args)
    except MemostoreError:
        raise  # the gate's refusals (UntrustedCode) keep their own message
    except Exception as exc:
        raise DecodeError(f"cannot rebuild a value with {fn!r}: {exc}") from exc
    dec._label(node, obj)
    _apply_state(dec, node, obj)
    return obj


def _apply_state(dec: Decoder, node: dict[str, Any], obj: Any) -> None:
    """Set state the way pickle does (``__setstate__``, else the instance dict)."""
    if "listitems" in node:
        items = [dec.node(x) for x in node["listitems"]]
        if hasattr(obj, "extend"):
            obj.extend(items)
        else:
            for x in items:
                obj.append(x)
    if "dictitems" in node:
        for key, value in node["dictitems"]:
            obj[dec.node(key)] = dec.node(value)
    if "state" not in node:
        return
    state = dec.node(node["state"])
    if "setstate" in node:
        dec.node(node["setstate"])(obj, state)
        return
    set_pickle_state(obj, state)


def set_pickle_state(obj: Any, state: Any) -> None:
    """Apply pickle *state* to *obj* as ``pickle`` does: ``__setstate__`` when the
    class has one, else the instance dict (and slots, for a ``(dict, slots)`` pair)."""
    if getattr(type(obj), "__setstate__", None) is not None:
        obj.__setstate__(state)
        return
    slotstate = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slotstate = state
    if state:
        obj.__dict__.update(state)
    if slotstate:
        for key, value in slotstate.items():
            setattr(obj, key, value)


def _module(dec: Decoder, node: dict[str, Any]) -> Any:
    from ..trust.gate import allow_module

    return allow_module(node.get("name"), dec.trust)


def _ref(dec: Decoder, node: dict[str, Any]) -> Any:
    return dec._decode_doc(node["id"])


_HANDLERS: dict[str, Callable[[Decoder, dict[str, Any]], Any]] = {
    "same": _same,
    "float": _float,
    "int": _int,
    "tuple": lambda dec, node: tuple(dec.node(x) for x in node["items"]),
    "frozenset": lambda dec, node: frozenset(dec.node(x) for x in node["items"]),
    "complex": lambda dec, node: complex(_num(node["re"]), _num(node["im"])),
    "bytes": _bytes,
    "bytearray": lambda dec, node: bytearray(_bytes(dec, node)),
    "str": _str,
    "dict": _dict,
    "odict": _dict,
    "set": _set,
    "object": _object,
    "reduce": _reduce,
    "code": lambda dec, node: dec.code(node, instantiate=False),
    "module": _module,
    "ref": _ref,
}


@contextlib.contextmanager
def _as_decode_error(doc_id: str) -> Iterator[None]:
    """Any failure to rebuild a stored value, as a DecodeError (a memo hit: a miss).

    A document checks out against its id, but its content is the writer's: a
    hostile or damaged one must not break the caller with an arbitrary error.
    """
    try:
        yield
    except MemostoreError:
        raise
    except RecursionError:
        raise DecodeError(f"value {doc_id[:12]} is nested too deeply to restore") from None
    except Exception as exc:
        raise DecodeError(
            f"cannot restore value {doc_id[:12]} ({type(exc).__name__}: {exc})"
        ) from exc


def _num(node: Any) -> float:
    if isinstance(node, dict):
        return _FLOATS[node["v"]]
    return float(node)
