"""Fingerprints: cheap values that change whenever an object's stored form may change.

The hash cache reuses a digest only while the object's fingerprint is equal
to the one taken when the digest was computed, so a fingerprint must cover
everything the encoding depends on. :func:`snapshot` builds one for a value
made of:

* immutable atoms (``None``, bool, int, float, complex, str, bytes, dtypes,
  devices, enum members), compared by type and value;
* tensors, by identity, version counter, data pointer (storage and offset),
  shape, stride, dtype and ``requires_grad``;
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

Speed matters here: a repeated digest of a model or dataset of 1,000 tensors
is a snapshot plus a comparison, and must stay under a millisecond. So the
tensors met during the walk are only collected, and described at the end in
a few C-level passes (``map`` over ``attrgetter``/``methodcaller``); the
modules of a tree are read through a per-layout plan (``module_plans.py``) that says which
``__dict__`` entries are atoms (picked in one ``itemgetter`` call), hook dicts
(usually empty: one truth test), or registered parameters, buffers and
children. A tensor's device, layout and conjugate/negative bits are not
sampled: in place they change only together with something that is (its
version counter or data pointer), or through ``t.data = ...`` assignments,
which give the tensor another storage (and data pointer) too. Writes that move
no version counter (``.data`` aliases, numpy views, fused optimizer kernels)
are seen as exposures of the storage (``exposure.py``).

A snapshot keeps the objects it compares by identity through weak
references: an object that died, and another one born at the same address,
never compare equal. ``weakref.ref(obj)`` returns the one plain reference an
object already has, so while the snapshot held in the cache keeps that
reference alive, a new snapshot of the same living objects holds the very
same reference objects, and a dead one can never equal a new one; comparing
two snapshots is therefore three C-level tuple comparisons.
"""

from __future__ import annotations

import enum
import operator
import types
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch

from . import exposure
from .exposure import any_live, raw_numpy, storage_state, unexposed_since
from .module_plans import ATOMS as _ATOMS
from .module_plans import SETS as _SETS
from .module_plans import Plan, plan_for, plans_by_class

_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
# Long homogeneous lists of these are snapshotted in one C-level pass.
_FAST_ELEMENTS = frozenset({int, float, str, bytes})
_FAST_MIN_LENGTH = 16
# Bounds the work (and memory) a snapshot may take; beyond it, re-hash instead.
MAX_ITEMS = 1 << 20

_DEFAULT_REDUCE = object.__reduce__
_DEFAULT_REDUCE_EX = object.__reduce_ex__
_DEFAULT_GETSTATE = getattr(object, "__getstate__", None)

# What a tensor's stored form depends on, read in C-level passes (see _finish).
_TENSOR_META = operator.attrgetter("_version", "shape", "dtype", "requires_grad")
# Unbound methods: no attribute lookup or bound-method object per tensor.
DATA_PTR = torch._C.TensorBase.data_ptr
STRIDE = torch._C.TensorBase.stride
_TENSOR_DICT = operator.attrgetter("__dict__")
_IS_LEAF = operator.attrgetter("is_leaf")


def leaf_grad(t: torch.Tensor) -> torch.Tensor | None:
    """*t*'s ``.grad``, part of its value (None for a non-leaf, whose grad autograd
    never fills, and which torch warns about reading)."""
    return t.grad if t.is_leaf else None


class _Marker:
    """A position marker in a snapshot, equal only to itself (never to 0 or False)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_EMPTY = _Marker("empty")
_FULL = _Marker("full")
_TENSORS = _Marker("tensors")


class NotProvable(Exception):
    """The value may change without its fingerprint changing: do not cache its digest."""


class Fingerprint:
    """A flat snapshot: identities (ids and references) plus everything else.

    Two fingerprints are equal when they saw the same objects, still alive,
    in the same states. With equal ids, the references are the same objects
    exactly when every object is still alive (see the module docstring), so
    the comparison never calls an object's own ``__eq__``. Their tensors'
    storages must also not have been exposed to writes that bypass version
    counters in between (``exposure.py``): with no exposure anywhere since
    (the usual case) that is one integer comparison.
    """

    __slots__ = ("gen", "ids", "refs", "rest", "tensor_refs")

    def __init__(
        self,
        ids: tuple[int, ...],
        refs: tuple[Any, ...],
        rest: tuple[Any, ...],
        tensor_refs: tuple[Any, ...] = (),
        gen: int = 0,
    ):
        self.ids = ids
        self.refs = refs
        self.rest = rest
        self.tensor_refs = tensor_refs
        self.gen = gen

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fingerprint):
            return NotImplemented
        if not (self.ids == other.ids and self.rest == other.rest and self.refs == other.refs):
            return False
        if self.gen == other.gen:
            return True
        tensors = [t for t in map(_DEREF, self.tensor_refs) if t is not None]
        if not unexposed_since(tensors, min(self.gen, other.gen)):
            return False
        # Proven unchanged up to the later one: later comparisons start from there.
        self.gen = other.gen = max(self.gen, other.gen)
        return True

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.ids, self.rest))


_DEREF = weakref.ref.__call__


class _Strong:
    """A strong reference with the call interface of a weakref (for un-weakref-able objects)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Strong) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        return _Strong(obj)


# -- tensors torch writes without moving their version counter ------------------------
# ``F.batch_norm`` updates the running statistics it is given from inside its
# kernel, and their version counters stay put (torch 2.13, CPU). The running
# statistics of norm layers (``_NormBase``: batch, sync batch and instance norm)
# are therefore "silent": a module's fingerprint holds their bytes, and their
# blob digests are never cached. Statistics that a user's own module passes to
# ``F.batch_norm`` fall under the ``.data`` rule: call ``memostore.forget_digest``.
_NORM_BASE = torch.nn.modules.batchnorm._NormBase
_RUNNING_STATS = ("running_mean", "running_var")
_silent: dict[int, weakref.ref[torch.Tensor]] = {}


def running_stats(m: torch.nn.Module) -> list[torch.Tensor]:
    """The running statistics of a norm layer (none for other modules), noted as silent."""
    if not isinstance(m, _NORM_BASE):
        return []
    buffers = m.__dict__.get("_buffers") or {}
    found = [t for t in map(buffers.get, _RUNNING_STATS) if isinstance(t, torch.Tensor)]
    for t in found:
        key = id(t)
        ref = _silent.get(key)
        if ref is None or ref() is not t:
            _silent[key] = weakref.ref(t, lambda r, key=key: _forget_silent(key, r))
    return found


def _forget_silent(key: int, ref: weakref.ref[torch.Tensor]) -> None:
    if _silent.get(key) is ref:
        del _silent[key]


def is_silent(t: torch.Tensor) -> bool:
    """Whether torch may write *t* without moving its version counter (see above)."""
    ref = _silent.get(id(t))
    return ref is not None and ref() is t


def content_bytes(t: torch.Tensor) -> bytes:
    """A copy of a (small) tensor's bytes, for fingerprints of silent tensors."""
    flat = t.detach().reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    return bytes(raw_numpy(flat.view(torch.uint8).cpu()))


def tensor_data_state(t: torch.Tensor) -> Hashable | None:
    """What a tensor's bytes depend on; None when it cannot be tracked.

    In-place writes bump the version counter (shared by views); ``.data``
    assignment or ``set_`` changes the storage pointer, offset, shape or
    stride; writes through ``t.data`` aliases, numpy views and fused optimizer
    kernels are exposures of the storage (``exposure.py``), and a storage an
    alias holds open is not tracked at all. Silent tensors (the running
    statistics of norm layers, see above) are never tracked.
    """
    if _silent and is_silent(t):
        return None
    state = untracked_data_state(t)
    if state is None:
        return None
    exposed = storage_state(t)
    if exposed is None:
        return None  # an alias may write it at any time
    return (state, exposed, exposure.STATE.floor)


def untracked_data_state(t: torch.Tensor) -> Hashable | None:
    """:func:`tensor_data_state`, whether or not *t* is silent."""
    # Unbound methods: this runs once per restored tensor.
    if _IS_INFERENCE(t) or t.layout is not _STRIDED or t.is_meta:
        return None
    return (
        t._version,
        DATA_PTR(t),
        _STORAGE_OFFSET(t),
        t.shape,
        STRIDE(t),
        t.dtype,
        t.device,
        _IS_CONJ(t),
        _IS_NEG(t),
    )


_IS_INFERENCE = torch._C.TensorBase.is_inference
_STORAGE_OFFSET = torch._C.TensorBase.storage_offset
_IS_CONJ = torch._C.TensorBase.is_conj
_IS_NEG = torch._C.TensorBase.is_neg
_STRIDED = torch.strided


def fingerprint_or_none(*values: Any) -> Fingerprint | None:
    """A snapshot of *values*, or None when one of them cannot be tracked."""
    try:
        return snapshot(values)
    except NotProvable:
        return None


def snapshot(value: Any) -> Fingerprint:
    """A comparable snapshot of *value* (see the module docstring)."""
    gen = exposure.STATE.gen
    builder = _Builder()
    builder.take(value)
    builder.finish()
    refs = tuple(builder.tensor_refs)
    if any_live(map(_DEREF, refs)):
        raise NotProvable("a tensor whose memory an alias may write at any time (exposure.py)")
    return Fingerprint(tuple(builder.ids), tuple(builder.refs), tuple(builder.rest), refs, gen)


class _Builder:
    __slots__ = (
        "active",
        "id_only",
        "ids",
        "items",
        "modules",
        "refs",
        "rest",
        "tensor_refs",
        "tensors",
    )

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.refs: list[Any] = []
        self.rest: list[Any] = []
        self.items = 0
        self.active: set[int] = set()
        self.modules: set[int] = set()
        # Collected during the walk, described in finish() in C-level passes.
        self.tensors: list[Any] = []
        # Objects whose content the snapshot holds in full: compared by id alone.
        self.id_only: list[Any] = []
        self.tensor_refs: list[Any] = []  # every tensor's weak reference, for exposure checks

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
        if cls in _PLAIN_TENSORS:
            rest.append(_TENSORS)
            self.tensors.append(value)
            return
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
        """One tensor, described at once (subclasses, and the fallback of finish())."""
        self.items += 1
        try:
            state = tensor_data_state(t)
        except RuntimeError as exc:  # e.g. a nested tensor has no strides
            raise NotProvable(f"cannot track changes of this tensor: {exc}") from None
        if state is None:
            if not t.is_meta:
                raise NotProvable("a tensor without a version counter")
            state = ("meta", t.shape, t.dtype)
        ref = weakref.ref(t)
        self.ids.append(id(t))
        self.refs.append(ref)
        self.tensor_refs.append(ref)
        rest = self.rest
        rest.append(state)
        rest.append(t.requires_grad)
        cls = type(t)
        rest.append(cls)
        if cls is not torch.Tensor and t.__dict__:
            self.take(t.__dict__)
        grad = leaf_grad(t)
        rest.append(grad is None)
        if grad is not None:
            self.take(grad)

    def finish(self) -> None:
        """Describe the collected tensors and identities, a C-level pass per field."""
        tensors, self.tensors = self.tensors, []
        rest = self.rest
        if tensors:
            self.items += len(tensors)
            if self.items > MAX_ITEMS:
                raise NotProvable("value too large to fingerprint")
            kinds = tuple(map(type, tensors))
            rest.append(kinds)
            if not set(kinds) <= _PLAIN_TENSORS:
                tensors = [t for t in tensors if t is not None]
            try:
                meta = tuple(map(_TENSOR_META, tensors))
                pointers = tuple(map(DATA_PTR, tensors))
                strides = tuple(map(STRIDE, tensors))
            except RuntimeError:
                # Inference, sparse or nested tensors: one at a time (this raises
                # NotProvable, or describes meta tensors).
                for t in tensors:
                    self.tensor(t)
            else:
                rest.append(meta)
                rest.append(pointers)
                rest.append(strides)
                leaves = map(_IS_LEAF, tensors)
                grads = [t.grad if leaf else None for t, leaf in zip(tensors, leaves, strict=True)]
                rest.append(tuple(g is None for g in grads))
                self.ids.extend(map(id, tensors))
                refs = list(map(weakref.ref, tensors))
                self.refs.extend(refs)
                self.tensor_refs.extend(refs)
                if any(map(len, map(_TENSOR_DICT, tensors))):
                    for t in tensors:
                        # Attributes set on a Parameter are stored with it.
                        if type(t) is not torch.Tensor and t.__dict__:
                            self.take(t.__dict__)
                    self.finish()  # tensors met inside those attributes
                if any(g is not None for g in grads):
                    for grad in grads:
                        if grad is not None:
                            self.take(grad)  # a grad is part of its tensor's value
                    self.finish()
        id_only, self.id_only = self.id_only, []
        if id_only:
            self.ids.extend(map(id, id_only))

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
            rest.append(bytes(raw_numpy(state)) if state.device.type == "cpu" else None)
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
            if kinds <= _PLAIN_TENSORS:
                # The common case of datasets: described together in finish().
                self.rest.append(_TENSORS)
                self.rest.append(len(value))
                self.tensors.extend(value)
                return
            if len(kinds) == 1:
                (kind,) = kinds
                if kind in _FAST_ELEMENTS:
                    self.items += len(value)
                    self.rest.append(kind)
                    self.rest.append(tuple(value))
                    return
        self.rest.append(len(value))
        take = self.take
        for x in value:
            take(x)

    def module(self, root: torch.nn.Module) -> None:
        """A module tree, walked directly: this is the hot path of model hashing.

        A module's content is in the snapshot in full (class, attribute names,
        types and values, its tensors, children and hooks), so modules and their
        sets are compared by id alone (for their aliasing), without references.
        """
        add_rest = self.rest.append
        add_id = self.id_only.append
        add_ids = self.id_only.extend
        add_tensors = self.tensors.extend
        seen = self.modules
        plans = plans_by_class
        stack = [root]
        pop, push = stack.pop, stack.extend
        while stack:
            m = pop()
            key = id(m)
            if key in seen:
                add_rest(("again", key))
                continue
            seen.add(key)
            d = m.__dict__
            values = tuple(d.values())
            names = tuple(d)
            kinds = tuple(map(type, values))
            plan = plans.get(type(m))
            if plan is None or plan.names != names or plan.kinds != kinds:
                plan = plan_for(type(m), names, kinds)
            params, buffers, children = plan.own(values)
            # The plan stands for the class, attribute names and attribute types.
            add_rest((plan, plan.atoms(values), tuple(params), tuple(buffers), tuple(children)))
            add_id(m)
            add_ids(plan.sets(values))
            if any(plan.containers(values)):
                self._containers(plan, values)
            add_tensors(params.values())  # None entries are sorted out in finish()
            add_tensors(buffers.values())
            if plan.norm:
                add_rest(tuple(map(content_bytes, running_stats(m))))
            if children:
                found = tuple(children.values())
                add_rest(tuple(map(type, found)))  # which names hold None
                push([c for c in reversed(found) if c is not None])
            for index in plan.others:
                self.take(values[index])

    def _containers(self, plan: Plan, values: tuple[Any, ...]) -> None:
        """Hook dicts and sets of a module, when one of them is not empty."""
        add_rest = self.rest.append
        add_rest(_FULL)
        for value in plan.containers(values):
            if type(value) in _SETS:
                if not set(map(type, value)) <= _ATOMS:
                    raise NotProvable("a set holding something other than plain atoms")
                add_rest(frozenset((type(x), x) for x in value))
            else:
                # Hook dicts are stored renumbered; a snapshot compares them in full.
                self.take(value)


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
