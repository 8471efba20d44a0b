"""Places in an object graph: the paths the identity walks and a hit's planner share.

A *path* names where an object stands: a root name (an argument, a data
global, ``""`` for a call's result), then steps: ``("a", name)`` an attribute
(``__dict__`` or ``__slots__``), ``("i", n)`` an item of a list or tuple,
``("k", key)`` a dict entry under a str, int, bool or None key. The walk
before and after a call (``identity.py``), the planner of a hit
(``replay.py``) and the relations it applies (``relations.py``) all step
through objects the same way, by :func:`children`.
"""

from __future__ import annotations

import enum
import types
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from ..values.codecs import Codec, CodecRegistry, Memory, registry
from .replay import MISSING, NotReplayable, nameable

__all__ = [
    "MEMORY",
    "PLAIN",
    "RESULT",
    "Path",
    "Step",
    "child",
    "children",
    "describe",
    "from_json",
    "is_plain",
    "kind_of",
    "memory_of",
    "navigate",
    "to_json",
    "with_child",
]

# The root name of a call's result (no argument or global is named "").
RESULT = ""

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
    if kind_of(cls, registry) == PLAIN:
        return True
    if (cls is tuple or cls is frozenset) and len(obj) <= 16:
        return all(is_plain(x) for x in obj)
    return False


# What the walks do with an object, by its type (see kind_of).
PLAIN, _SEQUENCE, _MAPPING, _LEAF, MEMORY, _OBJECT = range(6)
KINDS: dict[type, int] = {}


def kind_of(cls: type, codecs: CodecRegistry) -> int:
    """How the identity walk treats instances of *cls* (cached for the default registry)."""
    found = KINDS.get(cls) if codecs is registry else None
    if found is not None:
        return found
    if cls in _ATOMIC or issubclass(cls, _OPAQUE):
        found = PLAIN
    elif cls is list or cls is tuple:
        found = _SEQUENCE
    elif cls is dict:
        found = _MAPPING
    elif issubclass(cls, _LEAF_BUILTINS):
        found = _LEAF
    else:
        codec = None if cls.__module__ == "builtins" else codecs.for_type(cls)
        if codec is not None and codec.by_reference:
            found = PLAIN
        elif codec is not None and type(codec).memory is not Codec.memory:
            found = MEMORY
        elif codec is not None and codec.identity_leaf:
            found = _LEAF
        else:
            found = _OBJECT
    if codecs is registry:
        KINDS[cls] = found
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
    kind = kind_of(type(obj), codecs)
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
    codec = codecs.for_type(type(obj))
    attrs = codec.stored_attributes(obj) if codec is not None else None
    if attrs is None:
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
    if kind_of(cls, codecs) != MEMORY:
        return None
    codec = codecs.for_type(cls)
    return None if codec is None else codec.memory(obj)


def to_json(path: Path) -> list[Any]:
    """A path as JSON: ``[root, [kind, key], ...]``."""
    return [path[0], *([kind, key] for kind, key in path[1:])]


def from_json(json_path: Sequence[Any]) -> Path:
    """A path read back from its JSON."""
    return (json_path[0], *((kind, key) for kind, key in json_path[1:]))


def navigate(root: Any, path: Path) -> Any:
    """The object *path* names below *root* (the path's first element, a name, is skipped)."""
    obj = root
    for step in path[1:]:
        obj = child(obj, step)
    return obj
