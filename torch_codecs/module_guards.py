"""Tree guards: proof, in a few whole-list passes, that a module tree is unchanged.

A repeated digest of a model is a snapshot (``fingerprints.py``) compared with
the one taken when the digest was computed. The snapshot walks the tree one
module at a time, which costs about a microsecond and a half per module in
Python: too slow for a model of hundreds of layers passed to every call. A
:class:`TreeGuard` records the same facts as flat lists once, then checks the
live tree against them with whole-list operations that run in C (``map``,
``itemgetter``, ``chain``, list comparison), with no Python-level loop over
modules or tensors.

What a guard checks, which is what a module tree's stored form depends on:

* the same module objects, in the same breadth-first order, of the same classes;
* every module's ``__dict__``: the same keys in the same order, values of the
  same types, equal atoms (``None``, numbers, strings, dtypes, ...), the same
  functions (without closures: a layer's activation), tuples and lists of
  atoms equal item by item (with the same item types), sets of strings equal,
  and every other dict (the hook dicts) still empty;
* every module's ``_parameters``, ``_buffers`` and ``_modules``: the same
  names, in order, bound to the same objects;
* every tensor: its version counter, data pointer and ``requires_grad`` (its
  shape, stride and dtype change only with one of those, or by ``t.data = ...``,
  which is an exposure, below), and no attributes set on it; the running statistics of
  norm layers, which torch updates without moving their version counters, by
  their bytes;
* no tensor's storage exposed, since the guard last held, to writes that move
  no version counter (``exposure.py``): one integer comparison when nothing was
  exposed anywhere, a pass over the tensors' storages otherwise.

Identity is checked by ``id``. That is sound because every module and tensor a
guard names is watched through a weak reference whose callback marks the guard
dead: while a guard holds, all of them are alive, and a live object's id
belongs to no other object. A guard keeps no strong reference to anything but
atoms, so it never keeps a model, its hooks or its tensors alive.

A tree with anything else (hooks, a custom ``__getstate__``, ``None`` in place
of a submodule, a submodule registered twice, tensor subclasses, attributes holding other
objects) gets no guard, and the snapshot decides as before: slower, never stale.
"""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from types import BuiltinFunctionType, FunctionType
from typing import Any

import torch

from . import exposure
from .exposure import any_live, keys_unexposed_since
from .fingerprints import DATA_PTR, content_bytes, running_stats, untracked_data_state
from .module_plans import ATOMS

_DICT = attrgetter("__dict__")
_OWN_NAMES = frozenset({"_parameters", "_buffers", "_modules"})
_DICTS = frozenset({dict, OrderedDict})
_SETS = frozenset({set, frozenset})
_SEQUENCES = frozenset({tuple, list})
# Items of tuples and lists a guard compares by value (and by type).
_SEQUENCE_ITEMS = frozenset({type(None), bool, int, float, str})
_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
_DEFAULT_GETSTATE = torch.nn.Module.__getstate__
_DEREF = weakref.ref.__call__
# What a tensor's stored form depends on, one C-level pass each. Its shape,
# stride and dtype change only with its version counter or data pointer (every
# in-place operation that changes them moves the counter), or through
# ``t.data = other``, which is an exposure (exposure.py): not read per tensor.
_TENSOR_FIELDS: tuple[Callable[[Any], Any], ...] = (
    attrgetter("_version"),
    DATA_PTR,
    attrgetter("requires_grad"),
)


def _no_items(values: Sequence[Any]) -> tuple[Any, ...]:
    return ()


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """A C-level function taking the items at *positions* of a list, as a sequence."""
    if not positions:
        return _no_items
    if len(positions) == 1:
        return itemgetter(slice(positions[0], positions[0] + 1))
    return itemgetter(*positions)


class _Alive:
    """Cleared when any object a guard watches dies (see the module docstring)."""

    __slots__ = ("ok",)

    def __init__(self) -> None:
        self.ok = True

    def kill(self, _ref: Any) -> None:
        self.ok = False


def _values(dicts: list[dict[str, Any]]) -> list[Any]:
    """The values of *dicts*, concatenated in order."""
    return list(chain.from_iterable(map(dict.values, dicts)))


def _referents(dicts: list[dict[str, Any]]) -> list[Any]:
    """The objects ``gc.get_referents`` finds in *dicts*: their values (see below)."""
    return gc.get_referents(*dicts)


def _referents_are_values(dicts: list[dict[str, Any]]) -> bool:
    """Whether ``gc.get_referents`` lists exactly the values of *dicts*, in order.

    It does for dicts with string keys in CPython, in one C call, which is
    several times faster than chaining their values; a guard checks this once,
    when it is built, and uses the slower way otherwise.
    """
    return list(map(id, gc.get_referents(*dicts))) == list(map(id, _values(dicts)))


class TreeGuard:
    """A module tree's state as flat lists, checkable against the live tree (see above)."""

    __slots__ = (
        "alive",
        "atoms",
        "dict_values",
        "gen",
        "held",
        "keys",
        "kinds",
        "lens",
        "module_refs",
        "module_types",
        "own_keys",
        "own_lens",
        "pick_atoms",
        "pick_own",
        "pick_silent",
        "pick_sized",
        "pick_tensors",
        "referent_ids",
        "silent_bytes",
        "sized_lens",
        "storage_keys",
        "tensor_fields",
        "tensor_refs",
        "tensor_types",
    )

    @classmethod
    def build(cls, root: torch.nn.Module) -> TreeGuard | None:
        """A guard of *root*'s tree as it is now, or None where the tree does not qualify."""
        try:
            return cls._build(root)
        except (KeyError, TypeError, RuntimeError, AttributeError):
            return None  # an unusual module (no _modules, odd tensors): the snapshot decides

    @classmethod
    def _build(cls, root: torch.nn.Module) -> TreeGuard | None:
        modules = [root]
        seen = {id(root)}
        for m in modules:  # grows while it is walked: breadth-first order
            if type(m).__getstate__ is not _DEFAULT_GETSTATE:
                return None
            for child in m.__dict__["_modules"].values():
                if child is None or id(child) in seen:
                    return None
                seen.add(id(child))
                modules.append(child)
        dicts = list(map(_DICT, modules))
        self = cls.__new__(cls)
        self.dict_values = _referents if _referents_are_values(dicts) else _values
        flat = self.dict_values(dicts)
        keys = list(chain.from_iterable(dicts))
        kinds = list(map(type, flat))
        atoms: list[int] = []
        own: list[int] = []
        sized: list[int] = []
        for pos, (name, value, kind) in enumerate(zip(keys, flat, kinds, strict=True)):
            if kind in ATOMS or kind is BuiltinFunctionType:
                atoms.append(pos)
            elif kind is FunctionType and value.__closure__ is None:
                # e.g. a transformer layer's activation: compared by identity (==),
                # and its code, defaults and globals by the referents check below.
                atoms.append(pos)
            elif name in _OWN_NAMES and kind in _DICTS:
                own.append(pos)
            elif kind in _DICTS:
                if value:
                    return None  # hooks, or a dict attribute with content
            elif kind in _SETS:
                if not all(type(x) is str for x in value):
                    return None
                sized.append(pos)
            elif kind in _SEQUENCES and all(type(x) in _SEQUENCE_ITEMS for x in value):
                sized.append(pos)
            else:
                return None
        if len(own) != 3 * len(modules):
            return None
        own_dicts = [flat[pos] for pos in own]
        if not _referents_are_values(own_dicts):
            return None
        found = _values([flat[pos] for pos in own if keys[pos] != "_modules"])
        tensors = [t for t in found if t is not None]  # e.g. Linear(bias=False)
        if any(type(t) not in _PLAIN_TENSORS or t.__dict__ for t in tensors):
            return None
        if any(untracked_data_state(t) is None for t in tensors) or any_live(tensors):
            return None
        # What the values of every __dict__ refer to: the entries of the own dicts
        # (tensors and submodules), the items of sets and sequences, the items of
        # torch.Size atoms; nothing else, since every other dict is empty.
        referents = gc.get_referents(*flat)
        tensor_ids = set(map(id, tensors))

        alive = _Alive()
        self.alive = alive
        self.gen = exposure.STATE.gen
        # While every data pointer is as recorded, so is every storage (a pointer
        # is inside its storage): the keys to look up when something was exposed.
        self.storage_keys = list(map(exposure.storage_key, tensors))
        self.module_refs = [weakref.ref(m, alive.kill) for m in modules]
        unique = {id(t): t for t in tensors}
        self.tensor_refs = [weakref.ref(t, alive.kill) for t in unique.values()]
        # The other referents are atoms: held, so that their ids stay theirs.
        self.held = [r for r in referents if id(r) not in tensor_ids and id(r) not in seen]
        self.referent_ids = list(map(id, referents))
        self.module_types = list(map(type, modules))
        self.lens = list(map(len, dicts))
        self.keys = keys
        self.kinds = kinds
        self.pick_atoms = _picker(atoms)
        self.atoms = list(self.pick_atoms(flat))
        self.pick_own = _picker(own)
        self.own_lens = list(map(len, own_dicts))
        self.own_keys = list(chain.from_iterable(own_dicts))
        self.pick_sized = _picker(sized)
        self.sized_lens = list(map(len, self.pick_sized(flat)))
        self.pick_tensors = _picker([i for i, r in enumerate(referents) if id(r) in tensor_ids])
        self.tensor_types = list(map(type, tensors))
        self.tensor_fields = [list(map(f, tensors)) for f in _TENSOR_FIELDS]
        silent = {id(t) for m in modules for t in running_stats(m)}
        self.pick_silent = _picker([i for i, t in enumerate(tensors) if id(t) in silent])
        self.silent_bytes = list(map(content_bytes, self.pick_silent(tensors)))
        return self

    def holds(self, root: torch.nn.Module) -> bool:
        """True when *root*'s tree is provably as it was when the guard was built."""
        # The check makes a few thousand short-lived tuples (shapes, strides): keep
        # the cyclic collector from running over the whole heap because of them.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._holds(root)
        except Exception:  # e.g. a tensor's __eq__ reached through an odd attribute
            return False
        finally:
            if collecting:
                gc.enable()

    def _holds(self, root: torch.nn.Module) -> bool:
        if not self.alive.ok:
            return False
        modules = list(map(_DEREF, self.module_refs))
        if modules[0] is not root or list(map(type, modules)) != self.module_types:
            return False
        dicts = list(map(_DICT, modules))
        if list(map(len, dicts)) != self.lens or list(chain.from_iterable(dicts)) != self.keys:
            return False
        # Every value keeps its type; atoms keep their values.
        flat = self.dict_values(dicts)
        if list(map(type, flat)) != self.kinds or list(self.pick_atoms(flat)) != self.atoms:
            return False
        # Own dicts keep their names; they, sets and sequences keep their lengths.
        own = self.pick_own(flat)
        if list(map(len, own)) != self.own_lens or list(chain.from_iterable(own)) != self.own_keys:
            return False
        if list(map(len, self.pick_sized(flat))) != self.sized_lens:
            return False
        # With those lengths fixed, equal referents mean: the same tensors and
        # submodules in every own dict, the same items in every set and sequence,
        # and every other dict (hooks) still empty.
        referents = gc.get_referents(*flat)
        if list(map(id, referents)) != self.referent_ids:
            return False
        tensors = self.pick_tensors(referents)
        if list(map(type, tensors)) != self.tensor_types or any(map(len, map(_DICT, tensors))):
            return False
        if not all(
            list(map(field, tensors)) == recorded
            for field, recorded in zip(_TENSOR_FIELDS, self.tensor_fields, strict=True)
        ):
            return False
        # Running statistics of norm layers: by their bytes (see fingerprints.py).
        if list(map(content_bytes, self.pick_silent(tensors))) != self.silent_bytes:
            return False
        gen = exposure.STATE.gen
        if gen != self.gen:
            if not keys_unexposed_since(self.storage_keys, self.gen):
                return False
            self.gen = gen  # unchanged up to now: the next check starts from here
        return True
