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

Everything else, a hit updates in place. :class:`Relations` applies the
records while ``replay.Planner`` plans a hit. The walk follows ``__dict__``
and ``__slots__`` attributes, list and tuple items and the entries of dicts
under str, int, bool or None keys; a codec's :attr:`identity_leaf` values
(tensors) are not entered. Past :data:`LAYOUT_MAX` objects, the objects not
yet reached are not compared, and are updated in place as before; past
65,536 objects after the call (a large new result), no more relations are
recorded.
"""

from __future__ import annotations

import enum
import gc
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..values.codecs import Codec, CodecRegistry, Memory, registry
from .replay import MISSING, NotReplayable, nameable

if TYPE_CHECKING:
    from .replay import Planner

__all__ = [
    "LAYOUT_MAX",
    "RESULT",
    "Layout",
    "Relations",
    "children",
    "layout",
    "relations_of",
]

# The root name of a call's result (no argument or global is named "").
RESULT = ""
# Objects a layout notes at most; the rest are updated in place, as before.
LAYOUT_MAX = 1 << 14
# Objects the walk after the call enters at most (a large new result): past it,
# no more relations are recorded (what lies further restores as stored).
_WALK_MAX = 1 << 16

Step = tuple[str, Any]
Path = tuple[Any, ...]

_ATOMIC = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        range,
        slice,
        type(Ellipsis),
        type(NotImplemented),
    }
)
_OPAQUE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
    enum.Enum,
    weakref.ref,
)
_LEAF_BUILTINS = (set, frozenset, bytearray, memoryview)
_slot_names: dict[type, tuple[str, ...]] = {}


def is_plain(obj: Any) -> bool:
    """Whether *obj*'s identity never matters: atoms, code, and tuples of such values."""
    cls = type(obj)
    if _kind(cls, registry) == _PLAIN:
        return True
    if (cls is tuple or cls is frozenset) and len(obj) <= 16:
        return all(is_plain(x) for x in obj)
    return False


# What the walks do with an object, by its type (see _kind).
_PLAIN, _SEQUENCE, _MAPPING, _LEAF, _MEMORY, _OBJECT = range(6)
_kinds: dict[type, int] = {}


def _kind(cls: type, codecs: CodecRegistry) -> int:
    """How the identity walk treats instances of *cls* (cached for the default registry)."""
    found = _kinds.get(cls) if codecs is registry else None
    if found is not None:
        return found
    if cls in _ATOMIC or issubclass(cls, _OPAQUE):
        found = _PLAIN
    elif cls is list or cls is tuple:
        found = _SEQUENCE
    elif cls is dict:
        found = _MAPPING
    elif issubclass(cls, _LEAF_BUILTINS):
        found = _LEAF
    else:
        codec = None if cls.__module__ == "builtins" else codecs.for_type(cls)
        if codec is not None and codec.by_reference:
            found = _PLAIN
        elif codec is not None and type(codec).memory is not Codec.memory:
            found = _MEMORY
        elif codec is not None and codec.identity_leaf:
            found = _LEAF
        else:
            found = _OBJECT
    if codecs is registry:
        _kinds[cls] = found
    return found


def _slots(cls: type) -> tuple[str, ...]:
    found = _slot_names.get(cls)
    if found is None:
        names: list[str] = []
        for klass in cls.__mro__:
            declared = klass.__dict__.get("__slots__", ())
            if isinstance(declared, str):
                declared = (declared,)
            names.extend(n for n in declared if n not in ("__dict__", "__weakref__"))
        found = _slot_names[cls] = tuple(dict.fromkeys(names))
    return found


def children(obj: Any, codecs: CodecRegistry = registry) -> Iterator[tuple[Step, Any]]:
    """The (step, child) pairs the identity walk follows from *obj*."""
    kind = _kind(type(obj), codecs)
    if kind == _SEQUENCE:
        yield from ((("i", i), x) for i, x in enumerate(obj))
        return
    if kind == _MAPPING:
        yield from ((("k", k), v) for k, v in obj.items() if nameable(k))
        return
    if kind != _OBJECT:
        return
    if isinstance(obj, (list, tuple)):
        yield from ((("i", i), x) for i, x in enumerate(obj))
    elif isinstance(obj, dict):
        yield from ((("k", k), v) for k, v in obj.items() if nameable(k))
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        yield from ((("a", name), v) for name, v in list(attrs.items()) if type(name) is str)
    for name in _slots(type(obj)):
        value = getattr(obj, name, MISSING)
        if value is not MISSING:
            yield ("a", name), value


def child(obj: Any, step: Step) -> Any:
    """The object one step below *obj* (NotReplayable when there is none)."""
    kind, key = step
    try:
        if kind == "a":
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict) and key in attrs:
                return attrs[key]
            if key in _slots(type(obj)):
                return getattr(obj, key)
        elif (kind == "i" and isinstance(obj, (list, tuple))) or (
            kind == "k" and isinstance(obj, dict)
        ):
            return obj[key]
    except (AttributeError, IndexError, KeyError, TypeError):
        pass
    raise NotReplayable(f"it has no {_describe_step(step)}")


def with_child(obj: Any, step: Step, value: Any) -> Any:
    """*obj* with *value* one step below it: itself, changed, or a new tuple."""
    kind, key = step
    if kind == "i" and type(obj) is tuple:
        items = list(obj)
        items[key] = value
        return tuple(items)
    if kind == "a":
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and key in attrs:
            attrs[key] = value
        else:
            object.__setattr__(obj, key, value)
    else:
        obj[key] = value
    return obj


def _describe_step(step: Step) -> str:
    kind, key = step
    if kind == "a":
        return f"attribute {key!r}"
    if kind == "i":
        return f"item {key}"
    return f"entry {key!r}"


def describe(path: Sequence[Any]) -> str:
    """A path as a reader writes it: ``tr.best``, ``opt.param_groups[1]['params']``."""
    root = path[0]
    out = "the result" if root == RESULT else str(root)
    for kind, key in path[1:]:
        out += f".{key}" if kind == "a" else f"[{key!r}]"
    return out


def memory_of(obj: Any, codecs: CodecRegistry = registry) -> Memory | None:
    """Where *obj*'s elements lie, for values whose codec says (tensors, numpy arrays)."""
    cls = type(obj)
    if _kind(cls, codecs) != _MEMORY:
        return None
    codec = codecs.for_type(cls)
    return None if codec is None else codec.memory(obj)


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


@contextmanager
def _no_collection() -> Iterator[None]:
    """Hold the cyclic garbage collector off meanwhile.

    The walks create an entry per object; with a large heap (torch loaded, a
    data set in memory) each collection they trigger traverses all of it, and
    costs more than the walk (measured: 4x for a list of 60,000 samples).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def layout(items: Iterable[tuple[str, Any]], codecs: CodecRegistry = registry) -> Layout:
    """Note where every object reachable from *items* stands (breadth first, bounded)."""
    with _no_collection():
        return _layout(items, codecs)


def _layout(items: Iterable[tuple[str, Any]], codecs: CodecRegistry) -> Layout:
    out = Layout(codecs)
    objects, places, expanded, viewable = out.objects, out.places, out.expanded, out.viewable
    queue: deque[tuple[Any, Path]] = deque()
    for name, value in items:
        if _kind(type(value), codecs) == _PLAIN or id(value) in objects:
            continue
        objects[id(value)] = (_ref(value), (name,))
        queue.append((value, (name,)))
    kinds = _kinds if codecs is registry else {}
    while queue and len(objects) <= LAYOUT_MAX:
        obj, path = queue.popleft()
        kind = kinds.get(type(obj)) or _kind(type(obj), codecs)
        if kind == _MEMORY:
            viewable.append((path, objects[id(obj)][0]))
            expanded.add(id(obj))
            continue
        key = id(obj)
        for step, value in children(obj, codecs):
            cls = type(value)
            if (kinds.get(cls) or _kind(cls, codecs)) == _PLAIN:
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
    with _no_collection():
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
        self.records.append([_json_path(path), kind, *more])

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
                self._record(path, "pre", _json_path(was))  # moved or shared here
            self._descend(obj, path, True)
            return
        first = self.new.get(id(obj))
        if first is not None:
            self._record(path, "same", _json_path(first))
            return
        mem = memory_of(obj, self.codecs)
        viewed = None if mem is None else before.viewed(mem)
        if viewed is not None:
            self._record(path, "view", _json_path(viewed[0]), viewed[1], mem.layout)  # type: ignore[union-attr]
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


def _json_path(path: Path) -> list[Any]:
    return [path[0], *([kind, key] for kind, key in path[1:])]


def _path(json_path: Sequence[Any]) -> Path:
    return (json_path[0], *((kind, key) for kind, key in json_path[1:]))


class Relations:
    """The recorded relations of one evaluation, applied while a hit is planned.

    Args:
        records: what :func:`relations_of` recorded.
        resolve: the caller's object that stood at a path before the call (the
            root names an argument or a global as the call sees it now).
        sources: the restored post-call states by root name (the result under
            :data:`RESULT`).
    """

    def __init__(
        self,
        records: Iterable[Sequence[Any]],
        resolve: Callable[[Path], Any],
        sources: Mapping[str, Any],
        codecs: CodecRegistry = registry,
    ) -> None:
        self.records: dict[Path, tuple[Any, ...]] = {}
        self.below: set[Path] = set()  # every proper prefix of a recorded path
        for record in records:
            path = _path(record[0])
            self.records[path] = tuple(record[1:])
            for n in range(1, len(path)):
                self.below.add(path[:n])
        self._resolve = resolve
        self.sources = sources
        self.codecs = codecs
        self._fresh: dict[Path, Any] = {}
        self._resolved: dict[Path, Any] = {}

    def record(self, path: Path | None) -> tuple[Any, ...] | None:
        return None if path is None else self.records.get(path)

    def resolve(self, path: Path) -> Any:
        found = self._resolved.get(path, MISSING)
        if found is MISSING:
            try:
                found = self._resolve(path)
            except NotReplayable as exc:
                raise NotReplayable(
                    f"{describe(path)}, which it took, is not there ({exc})"
                ) from None
            self._resolved[path] = found
        return found

    def source(self, path: Path) -> Any:
        obj = self.sources.get(path[0], MISSING)
        if obj is MISSING:
            raise NotReplayable(f"{describe(path)} was not stored")
        for step in path[1:]:
            obj = child(obj, step)
        return obj

    def apply(self, record: tuple[Any, ...], path: Path, source: Any, plan: Planner) -> Any:
        """The object a hit puts at *path*, where the miss left what *record* says."""
        kind = record[0]
        if kind == "new":
            return self.fresh(path, source, plan)
        if kind == "same":
            ref = _path(record[1])
            return self.fresh(ref, self.source(ref), plan)
        if kind == "pre":
            obj = self.resolve(_path(record[1]))
            planned = plan.in_place(obj, source, path)
            if planned is not obj and type(obj) not in (tuple, frozenset):
                raise NotReplayable(
                    f"{describe(_path(record[1]))} would have to be replaced by another object"
                )
            return planned
        if kind == "view":
            return self.view(self.resolve(_path(record[1])), record[2], record[3])
        raise NotReplayable(f"an unknown relation {kind!r} (written by a newer memostore?)")

    def view(self, base: Any, base_layout: Any, layout: Any) -> Any:
        codec = self.codecs.for_type(type(base))
        made = None if codec is None else codec.view(base, base_layout, layout)
        if made is None:
            raise NotReplayable(
                f"a view of a {type(base).__qualname__} laid out as the stored call's was cannot "
                "be made of the caller's"
            )
        return made

    def fresh(self, path: Path, source: Any, plan: Planner) -> Any:
        """*source* (a restored object), bound whole at *path*, its own relations applied."""
        found = self._fresh.get(path, MISSING)
        if found is not MISSING:
            return found
        self._fresh[path] = source  # a cycle back to it finds it
        out = self._substitute(path, source, plan) if path in self.below else source
        self._fresh[path] = out
        return out

    def _substitute(self, path: Path, obj: Any, plan: Planner) -> Any:
        for step, value in list(children(obj, self.codecs)):
            at = (*path, step)
            record = self.records.get(at)
            if record is not None:
                new = self.apply(record, at, value, plan)
            elif at in self.below:
                new = self._substitute(at, value, plan)
            else:
                continue
            if new is not value:
                obj = with_child(obj, step, new)
        return obj


def navigate(root: Any, path: Path) -> Any:
    """The object *path* names below *root* (the path's first element, a name, is skipped)."""
    obj = root
    for step in path[1:]:
        obj = child(obj, step)
    return obj
