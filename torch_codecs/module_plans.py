"""Plans: how to read the ``__dict__`` of the modules of one class, in a few C-level calls.

A model holds many modules of a few classes, each with the same attribute
names and types (``training``, ``_parameters``, a dozen hook dicts, ...). The
fingerprint of a model (``fingerprints.py``) reads each module's dict through
the :class:`Plan` of its layout, computed once: which entries are atoms
(picked in one ``itemgetter`` call and compared by value), hook dicts and sets
(usually empty: one truth test for all), registered parameters, buffers and
children, and anything else (snapshotted one by one).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

ATOMS = frozenset(
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
_DICTS = (dict, OrderedDict)
SETS = (set, frozenset)
_OWN = ("_parameters", "_buffers", "_modules")
# Module layouts remembered (a few per module class in practice).
_MAX_PLANS = 4096


def _picker(indices: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A C-level function taking the items at *indices* of a tuple, as a tuple."""
    if not indices:
        return _no_items
    if len(indices) == 1:
        return operator.itemgetter(slice(indices[0], indices[0] + 1))
    return operator.itemgetter(*indices)


class Plan:
    """How to read the ``__dict__`` of modules of one class and one layout.

    A layout is the dict's keys and the types of its values, in order; two
    modules with equal layouts share a plan, so a plan's identity in a snapshot
    stands for the class, the attribute names and the attribute types. Every
    picker returns a tuple (empty where the module has no such entry).
    """

    __slots__ = (
        "atoms",
        "buffers",
        "cls",
        "containers",
        "kinds",
        "names",
        "norm",
        "others",
        "own",
        "sets",
    )

    def __init__(self, cls: type, names: tuple[str, ...], kinds: tuple[type, ...]) -> None:
        self.cls, self.names, self.kinds = cls, names, kinds
        atoms, containers, sets, others = [], [], [], []
        own: dict[str, int] = {}
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
            if kind in ATOMS:
                atoms.append(i)
            elif name in _OWN and kind in _DICTS:
                own[name] = i
            elif kind in _DICTS and "hooks" in name:
                containers.append(i)  # usually empty: one truth test for all
            elif kind in SETS:
                containers.append(i)
                sets.append(i)
            else:
                others.append(i)
        self.atoms = _picker(atoms)
        self.containers = _picker(containers)
        self.others = tuple(others)
        where = [own.get(name) for name in _OWN]
        if None in where:  # a module whose __init__ did not run: a missing entry reads as {}
            self.own: Callable[[tuple[Any, ...]], tuple[Any, ...]] = lambda values: tuple(
                {} if i is None else values[i] for i in where
            )
        else:
            self.own = operator.itemgetter(*where)
        self.sets = _picker(sets)
        # Norm layers: their running statistics change without a version bump.
        self.norm = issubclass(cls, torch.nn.modules.batchnorm._NormBase)


def _no_items(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return ()


plans_by_class: dict[type, Plan] = {}
_plans: dict[tuple[Any, ...], Plan] = {}


def plan_for(cls: type, names: tuple[str, ...], kinds: tuple[type, ...]) -> Plan:
    key = (cls, names, kinds)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
            plans_by_class.clear()
        plan = _plans[key] = Plan(cls, names, kinds)
    plans_by_class[cls] = plan
    return plan
