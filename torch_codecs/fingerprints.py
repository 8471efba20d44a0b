"""Fingerprints: cheap values that change whenever an object's stored form may change.

The hash cache reuses a digest only while the object's fingerprint is equal
to the one taken when the digest was computed, so a fingerprint must cover
everything the encoding depends on. :func:`snapshot` builds one for a value
made of:

* immutable atoms (``None``, bool, int, float, complex, str, bytes, dtypes,
  devices, enum members), compared by type and value;
* tensors, by identity, version counter, storage pointer, offset, shape,
  stride, dtype, device and ``requires_grad`` (:func:`tensor_state`);
* lists, tuples, dicts and sets of those, by type, identity and content
  (identity matters: two names for one list encode differently from two
  equal lists);
* functions and classes, by identity (closures by the values they capture);
* objects pickled the default way (a class with no ``__reduce__``,
  ``__reduce_ex__`` or ``__getstate__`` of its own, modules and datasets
  included), by class, identity and a snapshot of their ``__dict__``.

Anything else (a numpy array, an object with custom pickling, a value with no
version counter) raises :class:`NotProvable`, and the owner is then re-hashed
on every use: slower, never stale.

Objects compared by identity are held through weak references, so an object
that died and another born at the same address never compare equal.
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
    {type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size}
)
# Long homogeneous lists of these are snapshotted in one C-level pass.
_FAST_ELEMENTS = frozenset({int, float, str, bytes})
_FAST_MIN_LENGTH = 16
# Bounds the work (and memory) a snapshot may take; beyond it, re-hash instead.
MAX_ITEMS = 1 << 20

_DEFAULT_REDUCE = object.__reduce__
_DEFAULT_REDUCE_EX = object.__reduce_ex__
_DEFAULT_GETSTATE = getattr(object, "__getstate__", None)


class NotProvable(Exception):
    """The value may change without its fingerprint changing: do not cache its digest."""


class Ident:
    """Compares equal only to an Ident of the very same, still living, object."""

    __slots__ = ("key", "ref")

    def __init__(self, obj: Any) -> None:
        self.key = id(obj)
        try:
            self.ref: Any = weakref.ref(obj)
        except TypeError:
            self.ref = _Strong(obj)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ident) or self.key != other.key:
            return False
        mine = self.ref()
        return mine is not None and mine is other.ref()

    def __hash__(self) -> int:
        return self.key


class _Strong:
    """A strong reference with the call interface of a weakref."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def tensor_data_state(t: torch.Tensor) -> Hashable | None:
    """What a tensor's bytes depend on; None when it cannot be tracked.

    In-place writes bump the version counter (shared by views); ``.data``
    assignment or ``set_`` changes the storage pointer. Writes through
    ``t.data`` or a numpy view are invisible: call ``memostore.forget_digest(t)``.
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


def tensor_state(t: torch.Tensor) -> Hashable:
    """Everything a tensor's node depends on (raises NotProvable when untracked)."""
    data = tensor_data_state(t)
    if data is None:
        if not t.is_meta:
            raise NotProvable("tensor without a version counter")
        data = ("meta", t.shape, t.dtype)
    extra: Any = ()
    if type(t) is not torch.Tensor and t.__dict__:
        extra = snapshot(t.__dict__)
    return (Ident(t), type(t), t.requires_grad, data, extra)


def fingerprint_or_none(*values: Any) -> Hashable | None:
    """A snapshot of *values*, or None when one of them cannot be tracked."""
    try:
        return snapshot(values)
    except NotProvable:
        return None


def snapshot(value: Any) -> Hashable:
    """A hashable, comparable snapshot of *value* (see the module docstring)."""
    return _Snapshotter().take(value)


class _Snapshotter:
    __slots__ = ("items", "active")

    def __init__(self) -> None:
        self.items = 0
        self.active: set[int] = set()

    def take(self, value: Any) -> Hashable:
        cls = type(value)
        if cls in _ATOMS:
            return (cls, value)
        self.items += 1
        if self.items > MAX_ITEMS:
            raise NotProvable("value too large to fingerprint")
        if isinstance(value, torch.Tensor):
            return tensor_state(value)
        key = id(value)
        if key in self.active:
            return ("cycle", key)
        self.active.add(key)
        try:
            return self._container(value, cls, key)
        finally:
            self.active.discard(key)

    def _container(self, value: Any, cls: type, key: int) -> Hashable:
        if cls is list or cls is tuple:
            return (cls, key if cls is list else 0, self._sequence(value))
        if cls is dict or cls is OrderedDict:
            return (cls, key, tuple((self.take(k), self.take(v)) for k, v in value.items()))
        if cls is set or cls is frozenset:
            return (cls, key, frozenset(self.take(x) for x in value))
        if isinstance(value, (type, types.BuiltinFunctionType, types.ModuleType)):
            return Ident(value)
        if isinstance(value, enum.Enum):
            return Ident(value)
        if isinstance(value, types.FunctionType):
            cells = value.__closure__ or ()
            try:
                captured = tuple(self.take(c.cell_contents) for c in cells)
            except ValueError:  # an empty cell
                captured = ("empty",)
            return (Ident(value), captured, self.take(value.__defaults__))
        if isinstance(value, types.MethodType):
            return (Ident(value.__func__), self.take(value.__self__))
        if isinstance(value, torch.Generator):
            state = value.get_state()
            return (Ident(value), bytes(state.numpy()) if state.device.type == "cpu" else None)
        if _pickles_by_dict(cls):
            state = getattr(value, "__dict__", None)
            if state is None:
                raise NotProvable(f"{cls.__qualname__} has no __dict__")
            return (Ident(cls), key, self.take(state))
        raise NotProvable(f"cannot track changes of a {cls.__module__}.{cls.__qualname__}")

    def _sequence(self, value: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
        if len(value) >= _FAST_MIN_LENGTH:
            kinds = set(map(type, value))
            if len(kinds) == 1:
                (kind,) = kinds
                if kind in _FAST_ELEMENTS:
                    self.items += len(value)
                    return (kind, tuple(value))
        return tuple(self.take(x) for x in value)


def _pickles_by_dict(cls: type) -> bool:
    """True when pickling *cls* means its class plus its ``__dict__``, nothing custom."""
    if getattr(cls, "__slots__", None):
        return False
    if issubclass(cls, torch.nn.Module):
        return True  # Module.__getstate__ only drops a compiled-call cache
    return (
        cls.__reduce__ is _DEFAULT_REDUCE
        and cls.__reduce_ex__ is _DEFAULT_REDUCE_EX
        and getattr(cls, "__getstate__", None) is _DEFAULT_GETSTATE
        and getattr(cls, "__setstate__", None) is None
    )
