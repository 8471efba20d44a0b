"""Values in code digests: constants, the trees that encode them, and cache guards.

A closure refers to values as small trees: a constant's digest, a reference
to another node (by symbol), a container of trees, or an object known only
by its type. Trees are hashed once every node has its final symbol.
"""

from __future__ import annotations

import enum
import operator
from collections import OrderedDict
from collections.abc import Callable, Iterable
from types import (
    BuiltinFunctionType,
    BuiltinMethodType,
    FunctionType,
    MethodDescriptorType,
    MethodWrapperType,
    ModuleType,
    WrapperDescriptorType,
)
from typing import Any

from ..odb.objects import hash_parts
from .source import qualname_of

__all__ = [
    "BUILTIN_CALLABLES",
    "CONTAINERS",
    "MISSING",
    "MUTABLE",
    "SCALARS",
    "Guards",
    "IgnoreRules",
    "Tree",
    "class_symbol",
    "encode_tree",
    "function_symbol",
    "is_pure",
    "real_module",
    "render_constant",
    "type_name",
]

MISSING = object()
SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
CONTAINERS = frozenset({list, tuple, set, frozenset, dict})
MUTABLE = frozenset({list, set, dict, OrderedDict})
BUILTIN_CALLABLES = (
    BuiltinFunctionType,
    BuiltinMethodType,
    MethodDescriptorType,
    MethodWrapperType,
    WrapperDescriptorType,
)

Tree = tuple[Any, ...]


def type_name(cls: type) -> str:
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls.__name__)}"


class IgnoreRules:
    """Globals that never enter a closure (see ``ignore_global``)."""

    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}
        self.names: set[str] = set()  # "name" for any module
        self.qualified: set[tuple[str, str]] = set()  # (module, name)
        self.generation = 0

    def add(self, obj_or_name: Any) -> None:
        if isinstance(obj_or_name, str):
            module, sep, name = obj_or_name.rpartition(":")
            if sep:
                self.qualified.add((module, name))
            else:
                self.names.add(name)
        else:
            self.objects[id(obj_or_name)] = obj_or_name
        self.generation += 1

    def has_object(self, value: Any) -> bool:
        found = self.objects.get(id(value), MISSING)
        return found is value

    def has_name(self, module: str | None, name: str) -> bool:
        return name in self.names or (module, name) in self.qualified


class Guards:
    """What a closure read, so a cached result can be re-checked cheaply."""

    def __init__(self) -> None:
        # (id(namespace), key) -> (namespace, key, value read or MISSING)
        self.bindings: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        # Data globals: only the type of the value is checked (the value keys each call).
        self.types: dict[tuple[int, str], tuple[Any, str, type]] = {}
        self.sizes: dict[int, tuple[Any, int]] = {}  # class dicts: entries added or removed
        self.snapshots: list[tuple[Any, Any]] = []

    def bind(self, mapping: Any, key: str, value: Any) -> None:
        """Watch ``mapping[key]`` for rebinding (to another object, or added or removed)."""
        slot = (id(mapping), key)
        if slot not in self.types:
            self.bindings.setdefault(slot, (mapping, key, value))

    def bind_type(self, mapping: Any, key: str, value: Any) -> None:
        """Watch only the type of ``mapping[key]``: a data global is read at every call anyway.

        Rebinding it to another value of the same type, or mutating it, keeps
        the closure; another type (a service object, a constant, another
        class whose code is a dependency) rebuilds it.
        """
        slot = (id(mapping), key)
        self.bindings.pop(slot, None)
        self.types[slot] = (mapping, key, type(value))

    def class_dict(self, cls: type) -> Any:
        """Start watching a class's ``__dict__``; bind its entries one by one."""
        proxy = cls.__dict__
        self.sizes.setdefault(id(cls), (proxy, len(proxy)))
        return proxy

    def namespace_size(self, namespace: dict[str, Any]) -> None:
        """Watch a namespace for names added or removed (code that reads it by computed name)."""
        self.sizes.setdefault(id(namespace), (namespace, len(namespace)))

    def snapshot(self, value: Any) -> None:
        """Watch a mutable constant for changes in place, if it is small enough to compare."""
        budget = [_SNAPSHOT_LIMIT]
        try:
            copy = _copy_constant(value, budget, 0)
        except _TooBig:
            return
        self.snapshots.append((value, copy))

    def checker(self) -> Callable[[], bool]:
        """A function that says whether everything the closure read is still as it was.

        Runs on every memoised call, so it is made of C-level loops: one
        ``itemgetter`` per namespace whose result is compared as a tuple,
        which is an identity test for values whose ``==`` is identity
        (functions, classes, modules, most objects); constants are compared
        with ``is`` (``1 == 1.0``, yet their digests differ).
        """
        by_namespace: dict[int, list[tuple[Any, str, Any]]] = {}
        by_identity: list[tuple[Any, str, Any]] = []
        missing: list[tuple[Any, str, Any]] = []
        for entry in self.bindings.values():
            value = entry[2]
            if value is MISSING:
                missing.append(entry)
            elif _eq_is_identity(value):
                by_namespace.setdefault(id(entry[0]), []).append(entry)
            else:
                by_identity.append(entry)
        getters, mappings, expected = [], [], []
        for entries in by_namespace.values():
            keys = [key for _, key, _ in entries]
            values = tuple(value for _, _, value in entries)
            if len(keys) == 1:  # itemgetter returns a bare value for one key
                keys, values = keys * 2, values * 2
            getters.append(operator.itemgetter(*keys))
            mappings.append(entries[0][0])
            expected.append(values)
        id_maps, id_keys, id_values = _columns(by_identity)
        miss_maps, miss_keys, _ = _columns(missing)
        type_maps, type_keys, type_values = _columns(list(self.types.values()))
        proxies = tuple(proxy for proxy, _ in self.sizes.values())
        sizes = [size for _, size in self.sizes.values()]
        snapshot_values = tuple(value for value, _ in self.snapshots)
        snapshot_copies = tuple(copy for _, copy in self.snapshots)
        getitem, contains, is_, eq = operator.getitem, operator.contains, operator.is_, operator.eq

        def still_valid() -> bool:
            try:
                return (
                    list(map(_call, getters, mappings)) == expected
                    and all(map(is_, map(getitem, id_maps, id_keys), id_values))
                    and not any(map(contains, miss_maps, miss_keys))
                    and list(map(len, proxies)) == sizes
                    and all(map(eq, snapshot_values, snapshot_copies))
                    and (
                        not type_maps
                        or all(map(is_, map(type, map(getitem, type_maps, type_keys)), type_values))
                    )
                )
            except Exception:  # a key deleted, an __eq__ that raises: rebuild
                return False

        return still_valid


_call = getattr(operator, "call", lambda f, arg: f(arg))  # operator.call is 3.11+


def _eq_is_identity(value: Any) -> bool:
    """Whether ``==`` on *value* can only be true for the same object."""
    t = type(value)
    if t in SCALARS or t in CONTAINERS:
        return False
    eq = getattr(t, "__eq__", None)
    return eq is object.__eq__ or (isinstance(value, type) and eq is type.__eq__)


def _columns(entries: list[tuple[Any, str, Any]]) -> tuple[tuple[Any, ...], ...]:
    return (
        tuple(e[0] for e in entries),
        tuple(e[1] for e in entries),
        tuple(e[2] for e in entries),
    )


# A mutable constant with more entries than this is not compared on every call:
# an in-place change to it is seen by the next process, not by this one.
_SNAPSHOT_LIMIT = 1000


class _TooBig(Exception):
    pass


def _copy_constant(value: Any, budget: list[int], depth: int) -> Any:
    t = type(value)
    if t not in CONTAINERS and t is not OrderedDict:
        return value
    budget[0] -= len(value)
    if budget[0] < 0 or depth > 32:  # too large to compare cheaply, or cyclic
        raise _TooBig
    if t is list:
        return [_copy_constant(v, budget, depth + 1) for v in value]
    if t is tuple:
        return tuple(_copy_constant(v, budget, depth + 1) for v in value)
    if t is dict or t is OrderedDict:
        return t((k, _copy_constant(v, budget, depth + 1)) for k, v in value.items())
    return t(_copy_constant(v, budget, depth + 1) for v in value)


def is_pure(value: Any, depth: int = 0) -> bool:
    """Plain data only: scalars in builtin containers (no functions, no objects)."""
    t = type(value)
    if t in SCALARS:
        return True
    if t not in CONTAINERS or depth > 64:
        return False
    if t is dict:
        return all(is_pure(k, depth + 1) and is_pure(v, depth + 1) for k, v in value.items())
    return all(is_pure(v, depth + 1) for v in value)


def real_module(func: FunctionType) -> str:
    """The module whose code defines *func* (``__module__`` can be copied by ``wraps``)."""
    name = func.__globals__.get("__name__")
    if isinstance(name, str):
        return name
    return func.__module__ if isinstance(func.__module__, str) else "<unknown>"


def function_symbol(func: FunctionType) -> str:
    """``module:qualname`` of the code of *func*, even under a ``functools.wraps`` name."""
    code = func.__code__
    qualname = func.__qualname__
    if qualname.rpartition(".")[2] != code.co_name:
        qualname = qualname_of(code)
    return f"{real_module(func)}:{qualname}"


def class_symbol(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def encode_tree(tree: Tree) -> str:
    """Digest of a tree; unordered containers sort their entries by digest."""
    tag = tree[0]
    if tag == "v":
        return tree[1]
    if tag == "ref":
        return hash_parts(["ref", tree[1].symbol])
    if tag == "set":
        return hash_parts(["set", tree[1], *sorted(encode_tree(t) for t in tree[2])])
    if tag == "dict":
        pairs = sorted(f"{encode_tree(k)}={encode_tree(v)}" for k, v in tree[1])
        return hash_parts(["dict", *pairs])
    if tag == "odict":
        return hash_parts(["odict", *(f"{encode_tree(k)}={encode_tree(v)}" for k, v in tree[1])])
    parts = [tag]
    for child in tree[1:]:
        if isinstance(child, str):
            parts.append(child)
        elif isinstance(child, tuple):
            parts.append(encode_tree(child))
        else:
            parts.append(hash_parts(encode_tree(t) for t in child))
    return hash_parts(parts)


_RENDER_LIMIT = 4000


def render_constant(value: Any) -> str:
    """Readable, deterministic text of a constant for diffs (sets sorted, long text cut)."""
    budget = [_RENDER_LIMIT]
    text = _render_inner(value, 0, budget)
    return text if budget[0] >= 0 else text[:_RENDER_LIMIT] + " ..."


def _render_items(items: Iterable[Any], depth: int, budget: list[int]) -> str:
    out = []
    for item in items:
        if budget[0] < 0:
            out.append("...")
            break
        out.append(_render_inner(item, depth + 1, budget))
    return ", ".join(out)


def _render_inner(value: Any, depth: int, budget: list[int]) -> str:
    t = type(value)
    if t in SCALARS:
        text = repr(value) if t not in (str, bytes) else repr(value[: _RENDER_LIMIT + 1])
    elif depth > 20:
        text = "..."
    elif t is list:
        text = "[" + _render_items(value, depth, budget) + "]"
    elif t is tuple:
        text = "(" + _render_items(value, depth, budget) + ("," if len(value) == 1 else "") + ")"
    elif t in (set, frozenset):
        if not value:
            text = f"{t.__name__}()"
        elif len(value) > 1000:  # sorted for a stable text, which costs
            text = f"<{t.__name__} of {len(value)} items>"
        else:
            body = ", ".join(sorted(_render_inner(v, depth + 1, [_RENDER_LIMIT]) for v in value))
            text = "{" + body + "}" if t is set else f"frozenset({{{body}}})"
    elif t in (dict, OrderedDict):
        pairs = (_Pair(k, v) for k, v in value.items())
        body = _render_items(pairs, depth, budget)
        text = "{" + body + "}" if t is dict else f"OrderedDict({{{body}}})"
    elif t is _Pair:
        key = _render_inner(value.key, depth, budget)
        text = f"{key}: {_render_inner(value.value, depth, budget)}"
    elif isinstance(value, FunctionType):
        text = f"<function {function_symbol(value)}>"
    elif isinstance(value, type):
        text = f"<class {class_symbol(value)}>"
    elif isinstance(value, ModuleType):
        text = f"<module {value.__name__}>"
    elif isinstance(value, enum.Enum):
        text = f"{type(value).__qualname__}.{value.name}"
    else:
        text = f"<{type_name(t)}>"
    budget[0] -= len(text)
    return text


class _Pair:
    __slots__ = ("key", "value")

    def __init__(self, key: Any, value: Any) -> None:
        self.key = key
        self.value = value
