"""Fingerprints: cheap values that change whenever an object's stored form may change.

The hash cache reuses a digest only while the object's fingerprint is equal
to the one taken when the digest was computed, so a fingerprint must cover
everything the encoding depends on. :func:`snapshot` builds one for a value
made of:

* immutable atoms (``None``, bool, int, float, complex, str, bytes, dtypes,
  devices, enum members), compared by type and value;
* tensors, by identity, version counter, storage pointer, offset, shape,
  stride, dtype and ``requires_grad`` (:func:`tensor_data_state`);
* lists, tuples, dicts and sets of those, by type, identity and content
  (identity matters: two names for one list encode differently from two
  equal lists);
* functions and classes, by identity (closures by the values they capture);
* modules, and objects pickled the default way (a class with no
  ``__reduce__``, ``__reduce_ex__``, ``__getstate__`` or ``__setstate__`` of its
  own: datasets, configs), by class, identity and their ``__dict__``.

Anything else (a numpy array, an object with custom pickling, an inference
tensor) raises :class:`NotProvable`, and the owner is then re-hashed on every
use: slower, never stale.

A snapshot keeps the objects it compares by identity through weak
references: an object that died, and another one born at the same address,
never compare equal. It is built flat (identities, then everything else), so
that comparing two snapshots is a few C-level tuple comparisons.
"""

from __future__ import annotations

import enum
import types
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch

_ATOMS = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        torch.dtype,
        torch.device,
        torch.Size,
        torch.layout,
        torch.memory_format,
    }
)
_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
# Long homogeneous lists of these are snapshotted in one C-level pass.
_FAST_ELEMENTS = frozenset({int, float, str, bytes})
_FAST_MIN_LENGTH = 16
_DICTS = (dict, OrderedDict)
# Bounds the work (and memory) a snapshot may take; beyond it, re-hash instead.
MAX_ITEMS = 1 << 20

_DEFAULT_REDUCE = object.__reduce__
_DEFAULT_REDUCE_EX = object.__reduce_ex__
_DEFAULT_GETSTATE = getattr(object, "__getstate__", None)


class NotProvable(Exception):
    """The value may change without its fingerprint changing: do not cache its digest."""


class Fingerprint:
    """A flat snapshot: identities (ids and references) plus everything else.

    Two fingerprints are equal when they saw the same objects, still alive,
    in the same states. A live object's id is unique, so equal ids plus live
    references mean the very same objects.
    """

    __slots__ = ("ids", "refs", "rest")

    def __init__(self, ids: tuple[int, ...], refs: tuple[Any, ...], rest: tuple[Any, ...]):
        self.ids = ids
        self.refs = refs
        self.rest = rest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fingerprint):
            return NotImplemented
        if self.ids != other.ids or self.rest != other.rest:
            return False
        return all(ref() is not None for ref in self.refs)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.ids, self.rest))


class _Strong:
    """A strong reference with the call interface of a weakref (for un-weakref-able objects)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        return _Strong(obj)


def tensor_data_state(t: torch.Tensor) -> Hashable | None:
    """What a tensor's bytes depend on; None when it cannot be tracked.

    In-place writes bump the version counter (shared by views); ``.data``
    assignment or ``set_`` changes the storage pointer, offset, shape or
    stride. Writes through ``t.data`` or a numpy view are invisible: call
    ``memostore.forget_digest(t)`` after them.
    """
    if t.is_inference() or t.layout != torch.strided or t.is_meta:
        return None
    return (
        t._version,
        t.data_ptr(),
        t.storage_offset(),
        t.shape,
        t.stride(),
        t.dtype,
        t.device,
        t.is_conj(),
        t.is_neg(),
    )


def fingerprint_or_none(*values: Any) -> Fingerprint | None:
    """A snapshot of *values*, or None when one of them cannot be tracked."""
    try:
        return snapshot(values)
    except NotProvable:
        return None


def snapshot(value: Any) -> Fingerprint:
    """A comparable snapshot of *value* (see the module docstring)."""
    builder = _Builder()
    builder.take(value)
    return Fingerprint(tuple(builder.ids), tuple(builder.refs), tuple(builder.rest))


class _Builder:
    __slots__ = ("active", "ids", "items", "modules", "refs", "rest")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.refs: list[Any] = []
        self.rest: list[Any] = []
        self.items = 0
        self.active: set[int] = set()
        self.modules: set[int] = set()

    def ident(self, obj: Any) -> None:
        self.ids.append(id(obj))
        self.refs.append(_ref(obj))

    def take(self, value: Any) -> None:
        cls = type(value)
        rest = self.rest
        if cls in _ATOMS:
            rest.append(cls)
            rest.append(value)
            return
        self.items += 1
        if self.items > MAX_ITEMS:
            raise NotProvable("value too large to fingerprint")
        if isinstance(value, torch.Tensor):
            self.tensor(value)
            return
        key = id(value)
        if key in self.active:
            rest.append(("cycle", key))
            return
        self.active.add(key)
        try:
            self._compound(value, cls)
        finally:
            self.active.discard(key)

    def tensor(self, t: torch.Tensor) -> None:
        self.items += 1
        state = tensor_data_state(t)
        if state is None:
            if not t.is_meta:
                raise NotProvable("a tensor without a version counter")
            state = ("meta", t.shape, t.dtype)
        self.ids.append(id(t))
        self.refs.append(weakref.ref(t))
        rest = self.rest
        rest.append(state)
        rest.append(t.requires_grad)
        cls = type(t)
        rest.append(cls)
        if cls is not torch.Tensor and t.__dict__:
            self.take(t.__dict__)

    def _compound(self, value: Any, cls: type) -> None:
        rest = self.rest
        if cls is list or cls is tuple:
            rest.append(cls)
            if cls is list:
                self.ident(value)
            self._sequence(value)
        elif cls is dict or cls is OrderedDict:
            rest.append(cls)
            self.ident(value)
            rest.append(len(value))
            for k, v in value.items():
                self.take(k)
                self.take(v)
        elif cls is set or cls is frozenset:
            rest.append(cls)
            self.ident(value)
            if not set(map(type, value)) <= _ATOMS:
                raise NotProvable("a set holding something other than plain atoms")
            rest.append(frozenset((type(x), x) for x in value))
        elif isinstance(value, torch.nn.Module):
            self.module(value)
        elif isinstance(value, (type, types.BuiltinFunctionType, types.ModuleType, enum.Enum)):
            self.ident(value)
        elif isinstance(value, types.FunctionType):
            self.ident(value)
            for cell in value.__closure__ or ():
                try:
                    self.take(cell.cell_contents)
                except ValueError:  # an empty cell
                    rest.append("empty")
            self.take(value.__defaults__)
        elif isinstance(value, types.MethodType):
            self.take(value.__func__)
            self.take(value.__self__)
        elif isinstance(value, weakref.ref):
            target = value()
            rest.append(weakref.ref)
            if target is None:
                rest.append(None)
            else:
                self.ident(target)
        elif isinstance(value, torch.Generator):
            self.ident(value)
            state = value.get_state()
            rest.append(bytes(state.numpy()) if state.device.type == "cpu" else None)
        elif _pickles_by_dict(cls):
            state = getattr(value, "__dict__", None)
            if state is None:
                raise NotProvable(f"{cls.__qualname__} has no __dict__")
            self.ident(cls)
            self.ident(value)
            self.take(state)
        else:
            raise NotProvable(f"cannot track changes of a {cls.__module__}.{cls.__qualname__}")

    def _sequence(self, value: list[Any] | tuple[Any, ...]) -> None:
        if len(value) >= _FAST_MIN_LENGTH:
            kinds = set(map(type, value))
            if len(kinds) == 1:
                (kind,) = kinds
                if kind in _FAST_ELEMENTS:
                    self.items += len(value)
                    self.rest.append(kind)
                    self.rest.append(tuple(value))
                    return
        self.rest.append(len(value))
        tensor = self.tensor
        take = self.take
        for x in value:
            if type(x) in _PLAIN_TENSORS:
                tensor(x)  # the common case of datasets: skip the dispatch
            else:
                take(x)

    def module(self, root: torch.nn.Module) -> None:
        """A module tree, walked directly: this is the hot path of model hashing."""
        rest = self.rest
        add_rest, add_id, add_ref = rest.append, self.ids.append, self.refs.append
        tensor = self.tensor
        stack = [root]
        while stack:
            m = stack.pop()
            if id(m) in self.modules:
                add_rest(("again", id(m)))
                continue
            self.modules.add(id(m))
            add_rest(type(m))  # held strongly: a class is never freed under us
            add_id(id(m))
            add_ref(weakref.ref(m))
            d = m.__dict__
            add_rest(tuple(d))
            for name, v in d.items():
                cls = type(v)
                if cls in _ATOMS:
                    add_rest(cls)
                    add_rest(v)
                elif name == "_parameters" or name == "_buffers":
                    add_rest(tuple(v))
                    for t in v.values():
                        if t is None:
                            add_rest(None)
                        else:
                            tensor(t)
                elif name == "_modules":
                    add_rest(tuple(v))
                    children = [c for c in v.values() if c is not None]
                    add_rest(len(children))
                    stack.extend(reversed(children))
                elif cls in _DICTS and not v and "hooks" in name:
                    # Hook dicts are stored renumbered, never by identity.
                    add_rest(0)
                else:
                    self.take(v)


def _pickles_by_dict(cls: type) -> bool:
    """True when pickling *cls* means its class plus its ``__dict__``, nothing custom."""
    if getattr(cls, "__slots__", None):
        return False
    return (
        cls.__reduce__ is _DEFAULT_REDUCE
        and cls.__reduce_ex__ is _DEFAULT_REDUCE_EX
        and getattr(cls, "__getstate__", None) is _DEFAULT_GETSTATE
        and getattr(cls, "__setstate__", None) is None
    )
