"""Restoring values from their content-addressed encoding.

Every decode builds fresh objects, so a caller's mutation of a restored value
never reaches the store or the next hit. Within one document, shared
references come back shared (``same`` nodes); across documents, codecs link
objects through :attr:`Decoder.session` and :meth:`Decoder.after`.

A stored value is data: every function, class and module it names goes
through one gate (``memostore/trust/gate.py``: :meth:`Decoder.code` for code
references, :meth:`Decoder.callee` for what a ``reduce`` node calls,
:func:`_module` for modules), and a document that does not decode, whatever
the reason, raises :class:`DecodeError` (a miss for a memo hit).

Decoding calls only what the gate allows to be called (a registry callable or
a class of the user's code, named by a code node: never an object decoded
from the value). State is *written*: an instance gets its state through its
instance dict and its class's own slot descriptors; a ``__setstate__``, a
list's ``extend`` or a dict's ``__setitem__`` runs only where the class that
defines it is the user's code or listed in the registry
(:func:`write_state`, :func:`add_list_items`, :func:`add_dict_items`).
"""

from __future__ import annotations

import contextlib
import copyreg
import enum
import re
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DecodeError, MalformedObject, MemostoreError, install_hint
from ..odb.objects import KIND_VALUE
from ..trust.sizes import WORD, call_size
from ..trust.state import enum_by_value
from . import order as orders_annex
from .budget import NODE_BYTES, DecodeBudget
from .codecs import CodecRegistry, registry

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore
    from ..trust.gate import TrustContext


# Types of the JSON scalars a document holds, each node its own value (see Decoder.node).
_SCALARS = frozenset({type(None), bool, int, float, str})
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
# An int too big for a JSON number: hex digits, "-" first when negative.
_HEX_INT = re.compile(r"-?[0-9a-f]+")


class _Frame:
    __slots__ = ("labels", "orders", "scratch")

    def __init__(self, orders: dict[int, list[int]] | None = None) -> None:
        self.labels: dict[int, Any] = {}
        self.scratch: dict[Any, Any] = {}
        self.orders = orders or {}  # id(items list) -> the order its items were stored in


class Decoder:
    """Rebuilds objects from value documents in one object database.

    Attributes:
        payloads: code digest -> blob id of code stored by value (from the evaluation).
        orders: blob id of the evaluation's order annex (``order.py``), or "".
        session: state shared by every document of this decode (for codecs).
        restored: (object, document id) for each document decoded, so the caller
            can enter restored objects into the hash cache without re-hashing.
    """

    def __init__(
        self,
        objects: BaseObjectStore,
        payloads: dict[str, str] | None = None,
        codecs: CodecRegistry = registry,
        orders: str = "",
    ) -> None:
        self.objects = objects
        self.payloads = payloads or {}
        self._orders_id = orders
        self._orders: dict[str, orders_annex.Annex] | None = None
        self.codecs = codecs
        self.session: dict[Any, Any] = {}
        self.restored: list[tuple[Any, str]] = []
        # Everything this decoder builds is charged here first (budget.py).
        self.budget = DecodeBudget()
        self._frames: list[_Frame] = []
        self._after: list[Callable[[], None]] = []
        self._trust: TrustContext | None = None
        self._roots: list[str] = []  # what the caller asked for (see TrustContext.roots)
        # Classes made from their state alone (an enabled family's): none of their
        # code may run while decoding, so their instances are never hashed or
        # handed to a callee.
        self._state_only: set[type] = set()

    # -- entry points ----------------------------------------------------------------
    def decode_value(self, doc_id: str) -> Any:
        """The value a value document encodes, as fresh objects."""
        if self._frames:
            return self._decode_doc(doc_id)
        self._roots.append(doc_id)
        with _as_decode_error(doc_id):
            obj = self._decode_doc(doc_id)
            while self._after:
                self._after.pop(0)()
        return obj

    def decode_mapping(self, doc_id: str) -> list[tuple[str, Any]]:
        """The (name, value) pairs of an arguments document."""
        self._roots.append(doc_id)
        node = self._doc_node(doc_id)
        if not isinstance(node, dict) or node.get("$") != "args":
            raise MalformedObject(f"object {doc_id} is not an arguments document")
        self._frames.append(_Frame(self._orders_of(doc_id, node)))
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
            from .code_refs import code_digest

            self._trust = TrustContext(
                self.objects, code_digest, self.codecs.load_entry_points, self._roots
            )
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
        """A blob's bytes, checked against its id (charged to the budget)."""
        data = self.objects.get_bytes(blob_id)
        self.charge(len(data), "a blob's bytes", blob_id, len(data))
        return data

    def charge(self, nbytes: int, what: str, blob: str = "", blob_size: int = 0) -> None:
        """Charge *nbytes* that decoding is about to build for *what* to the decode budget.

        *blob*: the blob they come from, of *blob_size* bytes, which counts as read
        (once per decode). Raises DecodeBudgetExceeded when over budget.
        """
        if blob:
            self.budget.read(blob, blob_size)
        self.budget.charge(nbytes, what)

    def call(
        self, fn: Any, args: list[Any], kwargs: dict[str, Any] | None = None, new: bool = False
    ) -> Any:
        """``fn(*args, **kwargs)``, charged first with what it may allocate (``trust/sizes.py``).

        *fn* is what the gate let be called (:meth:`callee`), or with *new* a
        class the gate let be made, made by ``fn.__new__(fn, *args, **kwargs)``;
        the arguments were decoded from the value.
        """
        kwargs = kwargs or {}
        size = WORD * (len(args) + len(kwargs)) + call_size(fn, args, kwargs)
        self.charge(size, f"a call of {_name(fn)}")
        return fn.__new__(fn, *args, **kwargs) if new else fn(*args, **kwargs)

    def blob_path(self, blob_id: str) -> Path | None:
        """A file holding the blob (for memory mapping), or None if not on disk."""
        return self.objects.blob_path(blob_id)

    def blob_file(self, blob_id: str) -> str | None:
        """Where a blob's file is, unchecked (open it and handle FileNotFoundError)."""
        return self.objects.blob_file(blob_id)

    def node(self, node: Any) -> Any:
        """Decode one node of the current document."""
        if node is None or isinstance(node, (bool, int, float, str)):
            return node  # an object of the parsed document itself: nothing is built
        budget = self.budget
        budget.enter()
        try:
            if isinstance(node, list):
                budget.charge(NODE_BYTES + WORD * len(node), "a list")
                out: list[Any] = []
                items = node
                if node and isinstance(node[0], dict) and node[0].get("$") == "label":
                    self._frames[-1].labels[node[0]["k"]] = out
                    items = node[1:]
                if len(items) >= 64 and _SCALARS.issuperset(map(type, items)):
                    out.extend(items)  # each its own value: checked in C, not item by item
                    return out
                for item in items:
                    out.append(self.node(item))
                return out
            tag = node["$"]
            items = node.get("items")
            budget.charge(NODE_BYTES + WORD * (len(items) if type(items) is list else 0), tag)
            handler = _HANDLERS.get(tag)
            if handler is not None:
                obj = handler(self, node)
            else:
                codec = self.codecs.for_tag(tag)
                if codec is None:
                    raise DecodeError(
                        f"no codec for {tag!r}: install the package that stores it "
                        f"(for torch values: {install_hint('torch')})"
                    )
                obj = codec.decode(node, self)
            self._label(node, obj)
            return obj
        finally:
            budget.depth -= 1

    def code(self, node: dict[str, Any], instantiate: bool = True) -> Any:
        """The function or class a code node names, through the trust gate.

        *instantiate*: the class is made by ``__new__`` and given its stored
        state (``object`` nodes, codecs), never called with stored arguments, so
        a class of a family the user enabled may be used (``trust/families.py``);
        the result is always a class. A code node standing as a value is decoded
        with ``instantiate=False``; what a ``reduce`` node calls goes through
        :meth:`callee`.
        """
        from ..trust.gate import STATE, VALUE
        from ..trust.state import vouches_for
        from .code_refs import decode_code_ref

        if not instantiate:
            return decode_code_ref(node, self, VALUE)
        cls = decode_code_ref(node, self, STATE)
        if not vouches_for(cls):
            self._state_only.add(cls)
        return cls

    def callee(self, node: Any) -> Any:
        """What a ``reduce`` or ``setstate`` node calls: a code node the gate lets be called.

        Never an object decoded from the value (an instance, a partial, a
        restored function): only a registry callable or a class of the user's
        code, named by a code node (``trust/gate.py``, ``CALL``).
        """
        from ..trust.gate import CALL
        from .code_refs import decode_code_ref

        if not isinstance(node, dict) or node.get("$") != "code":
            from ..trust.errors import refuse

            tag = node.get("$") if isinstance(node, dict) else type(node).__name__
            refuse(
                f"the result of a {str(tag)[:40]!r} node, as a function",
                "restoring calls only registered constructors and classes, named by code "
                "references, never an object decoded from the value",
                "",
            )
        return decode_code_ref(node, self, CALL)

    def check_inert(self, values: Any, what: str) -> None:
        """Refuse *values* (an iterable) holding an object made from state alone.

        Such an object's methods (its ``__hash__``, ``__iter__``, ``__index__``,
        ...) are library code that restoring must not run: it may not be hashed
        (a dict key, a set element) nor handed to a callee.
        """
        if self._state_only and _holds(values, self._state_only):
            raise DecodeError(
                f"a stored value uses an object restored from its state alone as {what}; "
                "that would run the object's own code"
            )

    # -- internals -------------------------------------------------------------------
    def _doc_node(self, doc_id: str) -> Any:
        doc = self.objects.get_doc(doc_id)
        if doc.kind != KIND_VALUE:
            raise MalformedObject(f"object {doc_id} is a {doc.kind}, not a value")
        self.budget.read(doc_id, len(doc.data))
        return doc.body["node"]

    def _orders_of(self, doc_id: str, node: Any) -> dict[int, list[int]]:
        if not self._orders_id:
            return {}
        if self._orders is None:
            self._orders = orders_annex.decode(self.blob_bytes(self._orders_id))
        entries = self._orders.get(doc_id)
        return orders_annex.resolve(node, entries) if entries else {}

    def in_order(self, items: list[Any], decoded: list[Any]) -> list[Any]:
        """*decoded* (the items of the stored list *items*) in the order they were met."""
        return orders_annex.reorder(decoded, self._frames[-1].orders.get(id(items)))

    def _decode_doc(self, doc_id: str) -> Any:
        node = self._doc_node(doc_id)
        self._frames.append(_Frame(self._orders_of(doc_id, node)))
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
    pairs = []
    for key, value in node["items"]:
        k = dec.node(key)
        dec.check_inert((k,), "a dict key")
        pairs.append((k, dec.node(value)))
    out.update(dec.in_order(node["items"], pairs))
    return out


def _set(dec: Decoder, node: dict[str, Any]) -> set[Any]:
    out: set[Any] = set()
    dec._label(node, out)
    items = [dec.node(x) for x in node["items"]]
    dec.check_inert(items, "a set element")
    out.update(dec.in_order(node["items"], items))
    return out


def _frozenset(dec: Decoder, node: dict[str, Any]) -> frozenset[Any]:
    items = [dec.node(x) for x in node["items"]]
    dec.check_inert(items, "a set element")
    return frozenset(dec.in_order(node["items"], items))


def _object(dec: Decoder, node: dict[str, Any]) -> Any:
    cls = dec.code(node["cls"])
    args = [dec.node(a) for a in node["args"]]
    dec.check_inert(args, "an argument of __new__")
    obj = dec.call(cls, args, new=True)
    dec._label(node, obj)
    _apply_state(dec, node, obj)
    return obj


def _reduce(dec: Decoder, node: dict[str, Any]) -> Any:
    fn = dec.callee(node["fn"])
    raw = node["args"]
    if type(raw) is not list:
        raise MalformedObject("the arguments of a reduce node are not a list")
    try:
        if fn is copyreg.__newobj__ or fn is copyreg.__newobj_ex__ or fn is copyreg._reconstructor:
            obj = _reconstruct(dec, fn, raw)
        else:
            args = [dec.node(a) for a in raw]
            dec.check_inert(args, "an argument of a call")
            obj = enum_by_value(fn, args) if isinstance(fn, enum.EnumMeta) else dec.call(fn, args)
    except MemostoreError:
        raise  # the gate's refusals (UntrustedCode) keep their own message
    except Exception as exc:
        raise DecodeError(f"cannot rebuild a value with {fn!r}: {exc}") from exc
    dec._label(node, obj)
    _apply_state(dec, node, obj)
    return obj


def _reconstruct(dec: Decoder, fn: Any, raw: list[Any]) -> Any:
    """pickle's reconstructors, with the class they make checked as an ``object`` node's is.

    ``copyreg.__newobj__(cls, *args)``, ``__newobj_ex__(cls, args, kwargs)`` and
    ``_reconstructor(cls, base, state)`` call methods of their first
    arguments: each must be a code node of a class restoring may make.
    """
    if not raw or not _is_code_node(raw[0]):
        raise DecodeError(f"{fn.__qualname__} is given no class to make")
    cls = dec.code(raw[0])
    if fn is copyreg.__newobj__:
        args = [dec.node(a) for a in raw[1:]]
        dec.check_inert(args, "an argument of __new__")
        return dec.call(cls, args, new=True)
    if len(raw) != 3:
        raise MalformedObject(f"{fn.__qualname__} takes 3 arguments, not {len(raw)}")
    if fn is copyreg.__newobj_ex__:
        args, kwargs = dec.node(raw[1]), dec.node(raw[2])
        if type(args) not in (tuple, list) or type(kwargs) is not dict:
            raise MalformedObject("__newobj_ex__ takes a tuple and a dict")
        if any(type(k) is not str for k in kwargs):
            raise MalformedObject("__newobj_ex__ takes keyword arguments named by strings")
        dec.check_inert([*args, *kwargs.values()], "an argument of __new__")
        return dec.call(cls, list(args), kwargs, new=True)
    from ..trust.state import vouches_for

    base = dec.code(raw[1], instantiate=False) if _is_code_node(raw[1]) else None
    if not isinstance(base, type) or not issubclass(cls, base) or not vouches_for(base):
        raise DecodeError(f"_reconstructor is given a base that {cls.__qualname__} cannot use")
    state = dec.node(raw[2])
    dec.check_inert((state,), "an argument of __new__")
    # It calls base.__init__(obj, state) (bytearray's allocates): charged as base's.
    dec.charge(call_size(base, [state]), f"a call of {_name(base)}")
    return fn(cls, base, state)


def _name(fn: Any) -> str:
    """*fn*'s qualified name, for a refusal (read from the callable, never called)."""
    qualname = getattr(fn, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(fn).__qualname__


def _is_code_node(node: Any) -> bool:
    return isinstance(node, dict) and node.get("$") == "code"


def _apply_state(dec: Decoder, node: dict[str, Any], obj: Any) -> None:
    """Give *obj* its stored items and state, as pickle would, running only vouched code."""
    added = len(node.get("listitems") or ()) + len(node.get("dictitems") or ())
    if added:
        dec.charge(WORD * added, "stored items")
    if "listitems" in node:
        add_list_items(obj, [dec.node(x) for x in node["listitems"]])
    if "dictitems" in node:
        pairs = [(dec.node(k), dec.node(v)) for k, v in node["dictitems"]]
        dec.check_inert([k for k, _ in pairs], "a dict key")
        add_dict_items(obj, dec.in_order(node["dictitems"], pairs))
    if "state" not in node:
        return
    state = dec.node(node["state"])
    if "setstate" in node:
        setter = dec.callee(node["setstate"])
        dec.check_inert((obj, state), "an argument of a call")
        dec.call(setter, [obj, state])
        return
    write_state(obj, state)


def write_state(obj: Any, state: Any) -> None:
    """Give *obj* its pickled *state*, running none of its code unless it is vouched for.

    A ``__setstate__`` runs only when the class that defines it is the user's
    code or listed in the registry (``trust/state.py``); otherwise the state is
    written: a dict into the instance dict, a ``(dict, slots)`` pair's slots
    through the class's own slot descriptors. No ``setattr``, property or
    ``__getattr__`` of the object's class runs.

    Raises:
        UntrustedCode: the class has a ``__setstate__`` no one vouches for.
        MalformedObject: a state that is not what pickle would have stored.
    """
    from ..trust.state import method_may_run

    cls = type(obj)
    owner = _owner(cls, "__setstate__")
    if owner is not None:
        if not method_may_run(cls, "__setstate__"):
            from ..trust.errors import refuse

            symbol = f"{owner.__module__}:{owner.__qualname__}.__setstate__"
            refuse(
                symbol,
                "restoring writes state into objects, and runs only the "
                "__setstate__ of your classes and of the registry's",
                "",
            )
        vars(owner)["__setstate__"].__get__(obj, cls)(state)
        return
    slots = None
    if type(state) is tuple and len(state) == 2:
        state, slots = state
    if state is not None:
        if type(state) not in (dict, OrderedDict):
            raise MalformedObject(f"the stored state of a {cls.__qualname__} is not a dict")
        if state:
            dict.update(_instance_dict(obj), state)
    if slots is not None:
        if type(slots) not in (dict, OrderedDict):
            raise MalformedObject(f"the stored slots of a {cls.__qualname__} are not a dict")
        for key, value in slots.items():
            _slot(cls, key).__set__(obj, value)


def add_list_items(obj: Any, items: list[Any]) -> None:
    """Append pickled list items to *obj*: through its own ``extend`` or ``append`` if
    vouched for (``trust/state.py``), else through ``list``'s own for a list subclass."""
    from ..trust.state import method_may_run

    cls = type(obj)
    for name in ("extend", "append"):
        owner = _owner(cls, name)
        if owner is not None and method_may_run(cls, name):
            method = vars(owner)[name].__get__(obj, cls)
            if name == "extend":
                method(items)
            else:
                for item in items:
                    method(item)
            return
    if issubclass(cls, list):
        list.extend(obj, items)
        return
    raise DecodeError(f"a stored {cls.__qualname__} takes list items through code of its own")


def add_dict_items(obj: Any, pairs: list[tuple[Any, Any]]) -> None:
    """Set pickled dict items on *obj*: through its own ``__setitem__`` if vouched for,
    else through ``dict``'s own for a dict subclass."""
    from ..trust.state import method_may_run

    cls = type(obj)
    owner = _owner(cls, "__setitem__")
    if owner is not None and method_may_run(cls, "__setitem__"):
        setitem = vars(owner)["__setitem__"].__get__(obj, cls)
    elif issubclass(cls, dict):
        setitem = dict.__setitem__.__get__(obj, cls)
    else:
        raise DecodeError(f"a stored {cls.__qualname__} takes dict items through code of its own")
    for key, value in pairs:
        setitem(key, value)


def _owner(cls: type, name: str) -> type | None:
    """The class of *cls*'s MRO that defines *name* (None if none does)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def _instance_dict(obj: Any) -> dict[str, Any]:
    """*obj*'s instance dict, through the descriptor Python made for it (no lookup on obj)."""
    cls = type(obj)
    for klass in cls.__mro__:
        found = vars(klass).get("__dict__")
        if found is None:
            continue
        if type(found) is not types.GetSetDescriptorType:
            raise MalformedObject(f"{cls.__qualname__} defines __dict__ itself; not restored")
        return found.__get__(obj, cls)  # type: ignore[no-any-return]
    raise MalformedObject(f"a {cls.__qualname__} has no instance dict to hold its state")


def _slot(cls: type, key: Any) -> Any:
    """The slot descriptor named *key* that a class of *cls*'s MRO declares."""
    if type(key) is str:
        for klass in cls.__mro__:
            found = vars(klass).get(key)
            if found is None:
                continue
            if type(found) is types.MemberDescriptorType and "__slots__" in vars(klass):
                return found
            break
    raise MalformedObject(f"{cls.__qualname__} has no slot {str(key)[:40]!r}")


def _holds(values: Any, classes: set[type]) -> bool:
    """Whether *values*, or a plain container among them, holds an instance of *classes*."""
    stack = list(values)
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind in classes:
            return True
        if kind in (list, tuple, set, frozenset, dict, OrderedDict):
            if id(value) in seen:
                continue
            seen.add(id(value))
            stack.extend(value.items() if kind in (dict, OrderedDict) else value)
    return False


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
    "frozenset": _frozenset,
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
