"""Replaying an argument's post-call state onto the caller's own object, in place.

A body that trains ``model`` in place and returns None leaves the caller's
``model`` trained; a hit must too. The evaluation stores the argument's state
after the call; a hit restores it as fresh objects (the *source*) and makes
the caller's object (the *target*) equal to it without replacing it, so that
every other reference the program holds (an optimizer bound to the model's
parameters, a scheduler bound to the optimizer) sees the change.

Replay is planned, then committed. :class:`Planner` walks target and source
together and collects operations; nothing is changed until :meth:`commit`, so
a target that cannot be updated (:class:`NotReplayable`) leaves the program
untouched and the call runs instead. The walk pairs objects by position:

* immutable values (numbers, strings, functions, classes, modules) are
  replaced in their parent;
* lists, dicts, sets and bytearrays are updated item by item;
* tuples and frozensets keep their identity when every item could be updated
  in place, and are rebuilt otherwise;
* numpy arrays are copied into when shape and dtype agree;
* other objects get their ``__dict__`` and ``__slots__`` entries updated, or
  their ``__setstate__`` called with the source's state;
* a codec may take over for its types (``Codec.assign``: tensors are copied
  into, an optimizer's state is matched to its own parameters) and may prove
  a part unchanged (``Codec.unchanged``), which is then left alone.

Each target is planned once, however many times it is reached.

Where the miss bound a new object, moved one or made a view rather than
changing an object in place, the planner follows the evaluation's recorded
relations (``identity.py`` records them): it tracks the *path* of each place it
plans (a root name, then ``("a", attribute)``, ``("i", index)`` and
``("k", key)`` steps, ``places.py``) and asks :class:`~.relations.Relations`
what stands there.
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..values.codecs import CodecRegistry, registry

__all__ = ["KEY_TYPES", "MISSING", "NotReplayable", "Planner", "key_step", "nameable"]

# Dict keys a path can name (others: the entry is planned, its place not tracked).
KEY_TYPES = frozenset({str, int, bool, type(None)})
Step = tuple[str, Any]
Path = tuple[Any, ...]


def nameable(key: Any) -> bool:
    """Whether a dict key can name an entry in a path (JSON: str, bool, None, safe ints)."""
    cls = type(key)
    return cls in KEY_TYPES and (cls is not int or -_JSON_INT < key < _JSON_INT)


_JSON_INT = 1 << 53


def key_step(key: Any) -> Step | None:
    """The path step of a dict entry, or None when its key cannot be named in a path."""
    return ("k", key) if nameable(key) else None


MISSING: Any = object()

_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes, range, slice})
_OPAQUE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
)


class NotReplayable(Exception):
    """The source's state cannot be put into the target in place (the message says why)."""


class Planner:
    """Plans in-place updates of targets from sources; :meth:`commit` applies them.

    Args:
        codecs: the codec registry (``Codec.assign`` and ``Codec.unchanged``).
        relations: what the miss bound anew, moved or viewed (an
            ``relations.Relations``); None for an evaluation that recorded none
            (everything in place).
    """

    def __init__(self, codecs: CodecRegistry = registry, relations: Any = None) -> None:
        self.codecs = codecs
        self.relations = relations
        self.ops: list[Callable[[], None]] = []
        self._done: dict[int, Any] = {}
        self._keep: list[Any] = []  # targets planned, alive while their ids are keys
        self.path: Path | None = None  # the place being planned; None: not tracked

    def op(self, fn: Callable[[], None]) -> None:
        """Run *fn* at :meth:`commit` (after every other op planned before it)."""
        self.ops.append(fn)

    def commit(self) -> None:
        ops, self.ops = self.ops, []
        for fn in ops:
            fn()

    def root(self, name: str, target: Any, source: Any) -> Any:
        """The object that should stand as the argument or global *name* after the call."""
        outer, self.path = self.path, ()
        try:
            return self.value(target, source, name)
        finally:
            self.path = outer

    @contextmanager
    def descend(self, step: Step | None) -> Iterator[None]:
        """Plan what a codec plans meanwhile one *step* below the current place."""
        outer = self.path
        self.path = None if step is None or outer is None else (*outer, step)
        try:
            yield
        finally:
            self.path = outer

    def update(self, target: Any, source: Any, what: str) -> None:
        """Plan making *target* equal to *source* without replacing it.

        Raises NotReplayable when *target* itself would have to be replaced.
        """
        if self.value(target, source) is not target:
            raise NotReplayable(
                f"{what} would have to be replaced by another object "
                f"({type(target).__qualname__} -> {type(source).__qualname__})"
            )

    def value(self, target: Any, source: Any, step: Any = None) -> Any:
        """The object that should stand where *target* is: *target* updated, or another.

        *step* names the place below the current one (None: a place that is not
        tracked, such as an optimizer's per-parameter state).
        """
        outer = self.path
        path = None if step is None or outer is None else (*outer, step)
        relations = self.relations
        if relations is not None and path is not None:
            record = relations.records.get(path)
            if record is not None:
                return relations.apply(record, path, source, self)
        return self.in_place(target, source, path)

    def in_place(self, target: Any, source: Any, path: Path | None) -> Any:
        """:meth:`value` at *path*, whatever the relations say stands there."""
        cls = type(source)
        if cls in _ATOMS or isinstance(source, _OPAQUE):
            return source
        if type(target) is not cls:
            codec = None if cls.__module__ == "builtins" else self.codecs.for_type(cls)
            if codec is None or not codec.same_type(target, source):
                return self.whole(source, path)
        key = id(target)
        if key in self._done:
            return self._done[key]
        self._done[key] = target
        self._keep.append(target)
        outer, self.path = self.path, path
        try:
            codec = self.codecs.for_type(cls)
            if codec is not None:
                if codec.by_reference:
                    return source
                relations = self.relations
                below = relations is not None and path is not None and path in relations.below
                if not below and codec.unchanged(target, source):
                    return target
                if codec.assign(target, source, self):
                    return target
            return self._generic(target, source, cls)
        finally:
            self.path = outer

    def whole(self, source: Any, path: Path | None) -> Any:
        """*source* bound whole at *path* (the relations below it applied)."""
        relations = self.relations
        if relations is not None and path is not None and path in relations.below:
            return relations.fresh(path, source, self)
        return source

    # -- builtin containers and plain objects --------------------------------------------------
    def _generic(self, target: Any, source: Any, cls: type) -> Any:
        if cls is tuple or cls is frozenset:
            return self._immutable_container(target, source, cls)
        if isinstance(source, list):
            self.list_items(target, source)
        elif isinstance(source, dict):
            self.dict_items(target, source)
        elif isinstance(source, (set, bytearray)):
            if target != source:
                self.op(lambda: _replace_contents(target, source))
        elif _is_ndarray(source):
            self._ndarray(target, source)
            return target
        if type(source).__module__ == "builtins" and not hasattr(source, "__dict__"):
            if isinstance(source, (list, dict, set, bytearray)):
                return target
            raise NotReplayable(f"a {cls.__qualname__} cannot be updated in place")
        self.attributes(target, source)
        return target

    def _immutable_container(self, target: Any, source: Any, cls: type) -> Any:
        if len(target) != len(source) or cls is frozenset:
            return source if cls is frozenset else self._rebuilt(target, source, cls)
        items = [
            self.value(t, s, ("i", i)) for i, (t, s) in enumerate(zip(target, source, strict=True))
        ]
        if all(i is t for i, t in zip(items, target, strict=True)):
            return target
        del self._done[id(target)]  # another tuple stands here: not this one
        return cls(items)

    def _rebuilt(self, target: Any, source: Any, cls: type) -> Any:
        del self._done[id(target)]
        return self.whole(source, self.path)

    def list_items(self, target: list[Any], source: list[Any]) -> None:
        items = [
            self.value(target[i] if i < len(target) else MISSING, s, ("i", i))
            for i, s in enumerate(source)
        ]
        if len(items) != len(target) or any(
            a is not b for a, b in zip(items, target, strict=False)
        ):
            self.op(lambda: target.__setitem__(slice(None), items))

    def dict_items(self, target: dict[Any, Any], source: dict[Any, Any]) -> None:
        # In the order the miss left (restored with the value, values/order.py).
        items = [(k, self.value(target.get(k, MISSING), s, key_step(k))) for k, s in source.items()]
        same_keys = list(target) == [k for k, _ in items]
        if not same_keys or any(target[k] is not v for k, v in items):

            def apply() -> None:
                target.clear()
                for key, value in items:  # not update(): a Counter's would count pairs
                    target[key] = value

            self.op(apply)

    def _ndarray(self, target: Any, source: Any) -> None:
        if target.shape != source.shape or target.dtype != source.dtype:
            raise NotReplayable(
                f"a numpy array of shape {target.shape} ({target.dtype}) would have to become "
                f"one of shape {source.shape} ({source.dtype})"
            )
        if not target.flags.writeable:
            raise NotReplayable("a read-only numpy array would have to change")
        import numpy as np

        if not np.array_equal(target, source, equal_nan=target.dtype.kind in "fc"):
            self.op(lambda: np.copyto(target, source))

    def attributes(self, target: Any, source: Any) -> None:
        """Plan the update of an object's attributes (its pickled state)."""
        cls = type(source)
        setstate = getattr(cls, "__setstate__", None)
        custom = setstate is not None and setstate is not getattr(object, "__setstate__", None)
        state = _pickle_state(source)
        if custom and not isinstance(target, (list, dict)):
            if state is MISSING:
                raise NotReplayable(f"a {cls.__qualname__} has no state to restore")
            _check_takes(target, state)
            self.op(lambda: target.__setstate__(state))
            return
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
            for name, value in (slots or {}).items():
                old = getattr(target, name, MISSING)
                new = self.value(old, value, ("a", name))
                if new is not old:
                    self.op(lambda name=name, new=new: object.__setattr__(target, name, new))
        if state is MISSING or state is None:
            state = {}
        if not isinstance(state, dict):
            raise NotReplayable(f"a {cls.__qualname__} keeps a state that is not a dict")
        attrs = getattr(target, "__dict__", None)
        if attrs is None:
            if state:
                raise NotReplayable(f"a {cls.__qualname__} has no __dict__ to update")
            return
        self.namespace(attrs, state)

    def namespace(self, attrs: dict[str, Any], state: dict[str, Any]) -> None:
        """Plan making the attribute dict *attrs* hold *state*, entry by entry."""
        planned = {
            name: self.value(attrs.get(name, MISSING), value, ("a", name))
            for name, value in state.items()
        }
        gone = [name for name in attrs if name not in state]
        changed = {name: v for name, v in planned.items() if attrs.get(name, MISSING) is not v}
        if changed or gone:

            def apply() -> None:
                for name in gone:
                    attrs.pop(name, None)
                attrs.update(changed)

            self.op(apply)


def _replace_contents(target: Any, source: Any) -> None:
    if isinstance(target, bytearray):
        target[:] = source
    else:
        target.clear()
        target.update(source)


def _is_ndarray(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _pickle_state(obj: Any) -> Any:
    """The state pickling would save for *obj*, or MISSING.

    What its ``__reduce_ex__`` gives, not ``__getstate__`` alone: a class with a
    reduce of its own (``functools.partial``) keeps its state there, and its
    ``__setstate__`` takes only that.
    """
    try:
        reduced = obj.__reduce_ex__(2)
    except Exception:
        return MISSING
    if not isinstance(reduced, tuple) or len(reduced) < 3:
        return MISSING
    return reduced[2]


def _check_takes(target: Any, state: Any) -> None:
    """Refuse now, before anything changed, a state *target*'s ``__setstate__`` rejects.

    Tried on a copy of *target* (a hit must never stop half-way through its
    ops); a target that cannot be copied is left to the op itself.
    """
    try:
        probe = copy.copy(target)
    except Exception:
        return
    if probe is target:
        return
    try:
        probe.__setstate__(state)
    except Exception as exc:
        raise NotReplayable(
            f"a {type(target).__qualname__} does not take its stored state back "
            f"({type(exc).__name__}: {exc})"
        ) from None
