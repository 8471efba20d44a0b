"""What a call made while restoring may allocate, judged from its arguments before it runs.

The registry (``registry.py``) says *which* constructors restoring may call;
this module says *how much* each may allocate for the arguments a stored value
gives it, so that the decoder can charge the call to its budget
(``memostore/values/budget.py``) before making it: ``bytearray(1_200_000_000)``
is refused from its argument, not after it took the memory.

Every call is charged for the sized builtin objects it is handed (a
constructor may copy any iterable: ``list(range(N))``). Constructors whose int
arguments are sizes declare a sizer: by name (``"builtins:bytearray"``, the
numpy array constructors), or by a rule of a codec package (torch: its tensor
and module classes, ``torch.nn.functional``). A class inherits the sizer of
the first class of its MRO that has one, so a subclass of ``bytes`` is charged
as ``bytes``. A sizer only looks at arguments: it calls nothing on them.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Sizer = Callable[[Sequence[Any], Mapping[str, Any]], int]

# Bytes charged per element of a container a call may copy (one pointer).
WORD = 8
# Builtin objects whose len() is the number of elements a constructor may copy;
# len() of these runs no code of a decoded object.
_SIZED = (list, tuple, set, frozenset, dict, OrderedDict, deque, str, bytes, bytearray)


def length(value: Any) -> int:
    """The number of elements *value* holds, for a builtin sized object or a range; else 0."""
    kind = type(value)
    if kind is range:
        step = value.step
        n = (value.stop - value.start + step - (1 if step > 0 else -1)) // step
        return max(n, 0)  # computed, not len(): a range may be longer than sys.maxsize
    if kind in _SIZED:
        return len(value)
    return 0


def copies(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """What a call may allocate copying the sized objects it is handed (every call's charge)."""
    return WORD * sum(length(a) for a in (*args, *kwargs.values()))


def counts(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """``bytes(n)``, ``bytearray(n)``: an int argument is a number of bytes."""
    ints = sum(abs(a) for a in (*args, *kwargs.values()) if type(a) is int)
    return ints + copies(args, kwargs)


def product(values: Any) -> int:
    """The product of the positive ints in *values* (a shape, flattened through sequences)."""
    out = 1
    stack = [values]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is int and value > 0:
            out *= value
        elif kind in (tuple, list) or (kind.__name__ == "Size" and isinstance(value, tuple)):
            stack.extend(value)
    return out


def _numpy_itemsize(values: Sequence[Any]) -> int:
    numpy = sys.modules.get("numpy")
    sizes = [v.itemsize for v in values if numpy is not None and isinstance(v, numpy.dtype)]
    return max([WORD, *sizes])


def numpy_array(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """``ndarray(shape, dtype)`` and ``_reconstruct(cls, shape, dtype)``: a shape's worth."""
    values = (*args, *kwargs.values())
    shapes = [v for v in values if type(v) in (tuple, list, int)]
    return product(shapes) * _numpy_itemsize(values) + copies(args, kwargs)


def seed_sequence(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """``SeedSequence(pool_size=n)``: a pool of n words (its entropy is a seed, not a size)."""
    pool = kwargs.get("pool_size", 4)
    return WORD * (pool if type(pool) is int and pool > 0 else 0) + copies(args, kwargs)


@dataclass(frozen=True)
class SizeRule:
    """Objects of *package* that *predicate* accepts are charged by *sizer*."""

    package: str
    predicate: Callable[[Any], bool]
    sizer: Sizer

    def covers(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")


class Sizers:
    """Sizers by ``module:qualname`` and by package rule (codec packages add theirs)."""

    def __init__(self, names: Mapping[str, Sizer]) -> None:
        self._lock = threading.Lock()
        self._names = dict(names)
        self._rules: list[SizeRule] = []

    def add_rule(self, rule: SizeRule) -> None:
        with self._lock:
            if rule not in self._rules:
                self._rules.append(rule)

    def for_callable(self, fn: Any) -> Sizer:
        """The sizer of *fn*: its own, its class's MRO's first, a rule's, else :func:`copies`."""
        for obj in fn.__mro__ if isinstance(fn, type) else (fn,):
            module = getattr(obj, "__module__", None)
            qualname = getattr(obj, "__qualname__", None)
            if not isinstance(module, str) or not isinstance(qualname, str):
                continue
            found = self._names.get(f"{module}:{qualname}")
            if found is not None:
                return found
            for rule in self._rules:
                if rule.covers(module) and rule.predicate(obj):
                    return rule.sizer
        return copies


sizers = Sizers(
    {
        "builtins:bytes": counts,
        "builtins:bytearray": counts,
        "numpy:ndarray": numpy_array,
        "numpy._core.multiarray:_reconstruct": numpy_array,
        "numpy.core.multiarray:_reconstruct": numpy_array,
        "numpy.random.bit_generator:SeedSequence": seed_sequence,
    }
)


def call_size(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> int:
    """Bytes that calling *fn* with these arguments may allocate, at most (an estimate)."""
    kw = kwargs or {}
    return sizers.for_callable(fn)(args, kw)


def register_sizer(package: str, predicate: Callable[[Any], bool], sizer: Sizer) -> None:
    """For codec packages: calls of *package*'s objects that *predicate* accepts cost *sizer*."""
    sizers.add_rule(SizeRule(package, predicate, sizer))
