"""Which objects a body bound anew, moved, shared or viewed, and how a hit does the same.

A body changes the objects it is given in two ways that leave equal values
behind but differ for the rest of the program:

* it *mutates* an object in place (``opt.step()`` on the caller's parameters):
  every reference the caller holds sees the change;
* it *binds* a new object in its place (``sched._last_lr = [...]``,
  ``tr.best = torch.maximum(tr.best, v)``, ``tr.hist = tr.hist + [v]``): a
  reference the caller kept from before (``lrs.append(sched.get_last_lr())``)
  still names the old object, unchanged.

And it may create identities: a result that is a view of an argument
(``return x[:2]``), an object moved or shared from one argument into another
(``b.w = a.w``), one new object bound in two places.

Before a miss runs its body, :func:`layout` walks the objects it was given
(arguments and data globals) and notes each one's place: a *path* from a
root name through attribute, item and key steps. After the body,
:func:`relations_of` walks what changed (and the result) and records, where
the body did not leave an object in the place it was in:

``new``
    a new object stands where another object of the same type stood: a hit
    binds its restored copy there (it does not copy into the caller's object);
``pre``
    an object from before the call stands where it was not (moved, shared): a
    hit puts the caller's own object there (found along its path before the
    call), updated in place;
``same``
    the new object already recorded at another path: one object, restored once;
``view``
    a new tensor or array over the memory of one from before the call: a hit
    makes the same view of the caller's own.

Everything else, a hit updates in place. ``relations.Relations`` applies the
records while ``replay.Planner`` plans a hit (paths: ``places.py``). The walk follows ``__dict__``
and ``__slots__`` attributes, list and tuple items and the entries of dicts
under str, int, bool or None keys; a codec's :attr:`identity_leaf` values
(tensors) are not entered. Past :data:`LAYOUT_MAX` objects, the objects not
yet reached are not compared, and are updated in place as before; past
65,536 objects after the call (a large new result), no more relations are
recorded.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..odb.collector import collector_paused
from ..values.codecs import CodecRegistry, Memory, registry
from .places import (
    KINDS,
    MEMORY,
    PLAIN,
    RESULT,
    Path,
    Step,
    children,
    describe,
    is_plain,
    kind_of,
    memory_of,
    to_json,
)
from .replay import MISSING, NotReplayable

__all__ = ["LAYOUT_MAX", "Layout", "layout", "relations_of"]

# Objects a layout notes at most; the rest are updated in place, as before.
LAYOUT_MAX = 1 << 14
# Objects the walk after the call enters at most (a large new result): past it,
# no more relations are recorded (what lies further restores as stored).
_WALK_MAX = 1 << 16


class _Strong:
    """A strong reference called like a weak one (lists, dicts, tuples have no weak ones)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def _ref(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return _Strong(obj)


class Layout:
    """Where each object stood before a call: its path, and what each of its places held.

    Objects are held through weak references where they allow it, so that an
    object the body dropped and another born at its address are never taken
    for one another.
    """

    def __init__(self, codecs: CodecRegistry = registry) -> None:
        self.codecs = codecs
        self.objects: dict[int, tuple[Callable[[], Any], Path]] = {}
        # (id(parent), step) -> (id, type) of the object in that place
        self.places: dict[tuple[int, Step], tuple[int, type]] = {}
        self.expanded: set[int] = set()
        # Values that may be viewed (tensors, arrays): their memory is read only
        # when a new value after the call may view one of them (see viewed).
        self.viewable: list[tuple[Path, Callable[[], Any]]] = []
        self._memory: dict[Any, list[tuple[Memory, Path, Callable[[], Any]]]] | None = None
        self._paths: dict[Path, Any] | None = None

    def path_of(self, obj: Any) -> Path | None:
        """The path of *obj* before the call, if it was there then."""
        entry = self.objects.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None
        return entry[1]

    def held(self, parent: Any, step: Step) -> tuple[int, type] | None:
        """(id, type) of what *parent*'s place *step* held before the call."""
        return self.places.get((id(parent), step))

    def object_at(self, path: Path) -> Any:
        """The object that stood at *path* before the call (NotReplayable if none)."""
        if self._paths is None:
            self._paths = {}
            for ref, where in self.objects.values():
                obj = ref()
                if obj is not None:
                    self._paths[where] = obj
        found = self._paths.get(tuple(path), MISSING)
        if found is MISSING:
            raise NotReplayable(f"{describe(path)} is not known")
        return found

    def viewed(self, mem: Memory) -> tuple[Path, Any] | None:
        """The path and layout of the object from before the call whose memory *mem* lies in."""
        if self._memory is None:
            # Read now, after the call: a value whose memory was replaced meanwhile
            # (``t.data = ...``) is no longer in it, and must not be taken for its owner.
            self._memory = {}
            for path, ref in self.viewable:
                obj = ref()
                known = None if obj is None else memory_of(obj, self.codecs)
                if known is not None:
                    self._memory.setdefault(known.space, []).append((known, path, ref))
        best = None
        for known, path, ref in self._memory.get(mem.space, ()):
            if ref() is None or known.start > mem.start or mem.end > known.end:
                continue
            if best is None or (known.end - known.start) > (best[0].end - best[0].start):
                best = (known, path)
        return None if best is None else (best[1], best[0].layout)


def layout(items: Iterable[tuple[str, Any]], codecs: CodecRegistry = registry) -> Layout:
    """Note where every object reachable from *items* stands (breadth first, bounded)."""
    with collector_paused():  # the walks trigger collections of a large heap
        return _layout(items, codecs)


def _layout(items: Iterable[tuple[str, Any]], codecs: CodecRegistry) -> Layout:
    out = Layout(codecs)
    objects, places, expanded, viewable = out.objects, out.places, out.expanded, out.viewable
    queue: deque[tuple[Any, Path]] = deque()
    for name, value in items:
        if kind_of(type(value), codecs) == PLAIN or id(value) in objects:
            continue
        objects[id(value)] = (_ref(value), (name,))
        queue.append((value, (name,)))
    kinds = KINDS if codecs is registry else {}
    while queue and len(objects) <= LAYOUT_MAX:
        obj, path = queue.popleft()
        kind = kinds.get(type(obj)) or kind_of(type(obj), codecs)
        if kind == MEMORY:
            viewable.append((path, objects[id(obj)][0]))
            expanded.add(id(obj))
            continue
        key = id(obj)
        for step, value in children(obj, codecs):
            cls = type(value)
            if (kinds.get(cls) or kind_of(cls, codecs)) == PLAIN:
                continue
            places[(key, step)] = (id(value), cls)
            if id(value) not in objects:
                if len(objects) > LAYOUT_MAX:
                    break  # not expanded in full: its places are not compared
                where = (*path, step)
                objects[id(value)] = (_ref(value), where)
                queue.append((value, where))
        else:
            expanded.add(key)
    return out


def relations_of(
    before: Layout, roots: Sequence[tuple[str, Any, bool]], result: Any
) -> list[list[Any]]:
    """The records of what the body bound anew, moved, shared or viewed (JSON lists).

    *roots* are (name, value now, whether the name was bound to another object)
    for each argument and global the body changed; the result comes last.
    Each record is ``[path, kind, ...]`` with the path as a list (root name,
    then ``[kind, key]`` steps); see the module docstring for the kinds.
    """
    walk = _Walk(before)
    with collector_paused():  # the walks trigger collections of a large heap
        for name, value, rebound in roots:
            walk.root(name, value, in_place=not rebound)
        walk.root(RESULT, result, in_place=False)
    return walk.records


class _Walk:
    """One walk over the objects after a call, recording how they relate to before."""

    def __init__(self, before: Layout) -> None:
        self.before = before
        self.codecs = before.codecs
        self.records: list[list[Any]] = []
        self.new: dict[int, Path] = {}  # id of a new object -> where it was first met
        self.keep: list[Any] = []  # the new objects, alive while their ids are keys
        self.seen: set[int] = set()
        self.stack: list[tuple[Any, Path, bool]] = []
        self.visited = 0

    def _record(self, path: Path, kind: str, *more: Any) -> None:
        self.records.append([to_json(path), kind, *more])

    def root(self, name: str, value: Any, in_place: bool) -> None:
        if is_plain(value):
            return
        path: Path = (name,)
        if in_place and self.before.path_of(value) == path:
            self._descend(value, path, True)
        else:
            self._place(value, path, None)
        while self.stack and self.visited < _WALK_MAX:
            parent, where, parent_in_place = self.stack.pop()
            self.visited += 1
            for step, value in children(parent, self.codecs):
                if not is_plain(value):
                    held = self.before.held(parent, step) if parent_in_place else None
                    self._place(value, (*where, step), held)

    def _place(self, obj: Any, path: Path, held: tuple[int, type] | None) -> None:
        """*obj* stands at *path*, where *held* (id, type) stood before (None: not compared)."""
        before = self.before
        was = before.path_of(obj)
        if was is not None:
            if held is None or held[0] != id(obj):
                self._record(path, "pre", to_json(was))  # moved or shared here
            self._descend(obj, path, True)
            return
        first = self.new.get(id(obj))
        if first is not None:
            self._record(path, "same", to_json(first))
            return
        mem = memory_of(obj, self.codecs)
        viewed = None if mem is None else before.viewed(mem)
        if viewed is not None:
            self._record(path, "view", to_json(viewed[0]), viewed[1], mem.layout)  # type: ignore[union-attr]
            return
        self.new[id(obj)] = path
        self.keep.append(obj)
        if held is not None and held[1] is type(obj):
            # Another object of this type stood here: a hit binds the restored one
            # instead of copying into the caller's (which the caller may still hold).
            self._record(path, "new")
        self._descend(obj, path, False)

    def _descend(self, obj: Any, path: Path, in_place: bool) -> None:
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if in_place and id(obj) not in self.before.expanded:
            return  # past the layout's bound: not compared, updated in place as before
        self.stack.append((obj, path, in_place))
