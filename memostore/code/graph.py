"""The dependency closure of one function or class: traversal, naming, digests.

A closure is a graph of nodes (functions, classes, module constants, pinned
distributions, ...). Each node's digest covers its own code or value and the
*symbols* of what it references, never their digests, so cycles (mutual
recursion, a method that names its class) need no special handling: the
closure's digest is then taken over the set of nodes, sorted by symbol.

Building a closure runs in three passes: a breadth-first walk from the root
that collects nodes and the references between them, naming (symbols,
made unique in walk order), and hashing. How the globals, imports, cells
and defaults a function reads become nodes (code, constant, data or
service) is in ``bindings``. A function or class whose expansion
raises is keyed coarsely (``fallback``) and listed in ``failures``;
the walk goes on.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
from collections import OrderedDict, deque
from collections.abc import Callable
from types import (
    FunctionType,
    MethodType,
    ModuleType,
)
from typing import Any

from .bindings import Bindings, wrapped_of
from .fallback import CODE_FALLBACK, class_fallback, code_fallback, describe
from .modules import (
    PYTHON_SYMBOL,
    distribution_pin,
    find_module_file,
    is_stdlib_name,
    is_user_module,
    is_user_module_name,
    module_of,
    python_digest,
    under_library_root,
)
from .source import (
    class_source,
    code_facts,
    source_file,
)
from .values import (
    BUILTIN_CALLABLES,
    CONTAINERS,
    MISSING,
    MUTABLE,
    SCALARS,
    Guards,
    IgnoreRules,
    Tree,
    class_symbol,
    encode_tree,
    function_symbol,
    hash_parts,
    is_pure,
    real_module,
    render_constant,
    type_name,
)

__all__ = ["Closure", "Node"]

# Class attributes that record how the class was built, not what it does.
_CLASS_INTERNALS = frozenset({"_abc_impl"})


class Node:
    """One dependency in a closure."""

    __slots__ = (
        "base",
        "data",
        "digest",
        "kind",
        "local",
        "obj",
        "refs",
        "source",
        "symbol",
        "tree",
    )

    def __init__(self, kind: str, base: str, obj: Any = None) -> None:
        self.kind = kind
        self.base = base  # symbol before it is made unique within the closure
        self.symbol = base
        self.obj = obj  # keeps the object alive while its id is a key
        self.local = ""  # digest of the node's own code or value
        self.source: str | None = None
        self.refs: list[tuple[str, Tree]] = []
        self.tree: Tree | None = None  # a constant's value
        self.digest = ""
        # A data node's (namespace, name): where its value is read at each call.
        self.data: tuple[Any, str] | None = None


def _underlying_functions(value: Any) -> list[Any]:
    """The functions inside a class attribute (method, static/class method, property)."""
    if isinstance(value, FunctionType):
        return [value]
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if isinstance(value, functools.cached_property):
        return [value.func]
    return []


def _container_label(key: Any) -> str:
    text = repr(key) if type(key) in SCALARS else f"<{type(key).__name__}>"
    return f"[{text}]" if len(text) <= 80 else "[...]"


class Closure(Bindings):
    """One traversal from a root; build it, then read ``root`` and ``nodes``."""

    def __init__(self, ignore: IgnoreRules, digest_value: Callable[[Any], str]) -> None:
        self.ignore = ignore
        self.digest_value = digest_value
        self.guards = Guards()
        self.nodes: list[Node] = []
        self._by_key: dict[Any, Node] = {}
        self._queue: deque[tuple[Callable[..., None], Node, Any]] = deque()
        self._state_names: dict[int, frozenset[str]] = {}
        self._saw_mutable = False
        # (symbol, what failed, how it was keyed instead): each function, class
        # or binding the scan failed on.
        self.failures: list[tuple[str, str, str]] = []

    # -- entry points -------------------------------------------------------------------------
    def build(self, root: Any) -> Node:
        node = self._root_node(root)
        while self._queue:
            expand, pending, obj = self._queue.popleft()
            try:
                expand(pending, obj)
            except Exception as exc:  # one function or class must not break the call
                self._fall_back(pending, obj, exc)
        self._name_and_hash()
        return node

    def _root_node(self, root: Any) -> Node:
        if isinstance(root, functools.partial):
            func = root.func
            if isinstance(func, FunctionType):
                inner = function_symbol(func)
            else:
                qualname = getattr(func, "__qualname__", type(func).__qualname__)
                inner = f"{module_of(func)}:{qualname}"
            node = self._add(("partial", id(root)), "function", f"functools.partial({inner})", root)
            node.local = "partial"
            node.source = (
                f"functools.partial({inner}, *{render_constant(root.args)}, "
                f"**{render_constant(root.keywords)})"
            )
            node.refs.append(("func", self.tree(func, inner)))
            for i, arg in enumerate(root.args):
                node.refs.append((f"arg:{i}", self.tree(arg, f"{inner}.<args>")))
            for key, arg in sorted(root.keywords.items()):
                node.refs.append((f"kwarg:{key}", self.tree(arg, f"{inner}.<args>")))
            return node
        if isinstance(root, FunctionType):
            found = self.function_tree(root, None)
        elif isinstance(root, type):
            found = self.class_tree(root, None)
        else:
            found = ("external",)
        if found[0] == "ref" and found[1].kind in ("function", "class"):
            return found[1]
        # Not the user's code: the root is pinned by what owns it.
        module = module_of(root) or "<unknown>"
        qualname = getattr(root, "__qualname__", None) or type(root).__qualname__
        kind = "class" if isinstance(root, type) else "function"
        node = self._add(("external-root", id(root)), kind, f"{module}:{qualname}", root)
        node.local = "external"
        node.refs.append(("owner", self.external_tree(module) if found[0] == "external" else found))
        return node

    # -- nodes --------------------------------------------------------------------------------
    def _add(self, key: Any, kind: str, base: str, obj: Any = None) -> Node:
        node = Node(kind, base, obj)
        self._by_key[key] = node
        self.nodes.append(node)
        return node

    def python_tree(self) -> Tree:
        node = self._by_key.get("python")
        if node is None:
            node = self._add("python", "python", PYTHON_SYMBOL)
            node.digest = python_digest()
        return ("ref", node)

    def external_tree(self, module_name: str | None) -> Tree:
        """Pin code that is not the user's: by distribution, or by Python for the stdlib."""
        if not module_name or is_stdlib_name(module_name):
            return self.python_tree()
        symbol, digest = distribution_pin(module_name)
        node = self._by_key.get(("dist", symbol))
        if node is None:
            node = self._add(("dist", symbol), "distribution", symbol)
            node.digest = digest
        return ("ref", node)

    def module_tree(self, module: ModuleType) -> Tree:
        if is_user_module(module):
            return ("module", module.__name__)
        return self.external_tree(module.__name__)

    def unimported_tree(self, name: str) -> Tree:
        """A user module imported inside a function body that has not run yet."""
        if not is_user_module_name(name):
            return self.external_tree(name)
        node = self._by_key.get(("module", name))
        if node is None:
            node = self._add(("module", name), "module", name)
            file = find_module_file(name)
            sf = source_file(file) if file else None
            node.digest = sf.module_digest() if sf is not None else hash_parts(["missing", name])
        return ("ref", node)

    def function_tree(self, func: FunctionType, hint: str | None) -> Tree:
        module_name = real_module(func)
        module = sys.modules.get(module_name)
        if module is not None:
            user = is_user_module(module)
        else:
            filename = func.__code__.co_filename
            user = filename.startswith("<") or not under_library_root(filename)
        if not user:
            found = self.external_tree(module_name)
            wrapped = wrapped_of(func)
            if wrapped is not MISSING:
                return ("wrapper", found, self.tree(wrapped, hint))
            return found
        node = self._by_key.get(("function", id(func)))
        if node is None:
            base = function_symbol(func)
            if hint and func.__name__ == "<lambda>":
                base = hint
            node = self._add(("function", id(func)), "function", base, func)
            self._queue.append((self._expand_function, node, func))
        return ("ref", node)

    def class_tree(self, cls: type, hint: str | None) -> Tree:
        module_name = cls.__module__ if isinstance(cls.__module__, str) else "builtins"
        module = sys.modules.get(module_name)
        if module is not None:
            user = is_user_module(module)
        else:
            user = not is_stdlib_name(module_name) and not _is_distribution(module_name)
        if not user:
            return self.external_tree(module_name)
        node = self._by_key.get(("class", id(cls)))
        if node is None:
            node = self._add(("class", id(cls)), "class", class_symbol(cls), cls)
            self._queue.append((self._expand_class, node, cls))
        return ("ref", node)

    # -- values -------------------------------------------------------------------------------
    def tree(self, value: Any, hint: str | None) -> Tree:
        """How *value* enters a digest: by value, by reference, or by its type only."""
        found = self.constant_tree(value, hint, set())
        if found is not None:
            return found
        return self.object_tree(value, hint)

    def object_tree(self, value: Any, hint: str | None) -> Tree:
        """A value that is not hashed: its type's name, and its type as a dependency."""
        found: Tree = ("object", type_name(type(value)), self.class_tree(type(value), None))
        wrapped = wrapped_of(value)
        if wrapped is not MISSING:
            found = ("wrapper", found, self.tree(wrapped, hint))
        return found

    def constant_tree(self, value: Any, hint: str | None, active: set[int]) -> Tree | None:
        """The tree of a constant-like value, or None when *value* is not one."""
        if self.ignore.has_object(value):
            return ("ignored",)
        t = type(value)
        if t in SCALARS:
            return ("v", self.digest_value(value))
        if t in CONTAINERS or t is OrderedDict:
            if t in MUTABLE:
                self._saw_mutable = True
            if t is not OrderedDict and is_pure(value):
                return ("v", self.digest_value(value))
            if id(value) in active:
                return ("cycle",)
            active.add(id(value))
            try:
                return self._container_tree(value, hint, active)
            finally:
                active.discard(id(value))
        if isinstance(value, FunctionType):
            return self.function_tree(value, hint)
        if isinstance(value, type):
            return self.class_tree(value, hint)
        if isinstance(value, ModuleType):
            return self.module_tree(value)
        if isinstance(value, enum.Enum):
            return ("enum", self.class_tree(t, None), value.name)
        if isinstance(value, MethodType):
            owner = value.__self__
            if isinstance(owner, (type, ModuleType)):
                return ("method", self.tree(value.__func__, hint), self.tree(owner, None))
            return ("method", self.tree(value.__func__, hint), self.object_tree(owner, None))
        if isinstance(value, BUILTIN_CALLABLES):
            return (
                "builtin",
                getattr(value, "__qualname__", "?"),
                self.external_tree(module_of(value)),
            )
        if isinstance(value, functools.partial):
            return (
                "partial",
                self.tree(value.func, hint),
                [self.tree(arg, hint) for arg in value.args],
                [("kw", key, self.tree(arg, hint)) for key, arg in sorted(value.keywords.items())],
            )
        if isinstance(value, (staticmethod, classmethod, property, functools.cached_property)):
            return (t.__name__, [self.tree(f, hint) for f in _underlying_functions(value)])
        if isinstance(value, tuple) and hasattr(t, "_fields"):
            items = [self.constant_tree(v, hint, active) for v in value]
            if any(item is None for item in items):
                return None
            return ("namedtuple", self.class_tree(t, None), items)
        if dataclasses.is_dataclass(value) and t.__dataclass_params__.frozen:
            fields = []
            for f in dataclasses.fields(value):
                item = self.constant_tree(getattr(value, f.name), hint, active)
                if item is None:
                    return None
                fields.append(("field", f.name, item))
            return ("dataclass", self.class_tree(t, None), fields)
        return None

    def _container_tree(self, value: Any, hint: str | None, active: set[int]) -> Tree | None:
        t = type(value)
        if t is dict or t is OrderedDict:
            items = []
            for key, item in value.items():
                key_tree = self.constant_tree(key, hint, active)
                item_tree = self.constant_tree(
                    item, f"{hint}{_container_label(key)}" if hint else None, active
                )
                if key_tree is None or item_tree is None:
                    return None
                items.append((key_tree, item_tree))
            return ("odict" if t is OrderedDict else "dict", items)
        items = []
        for i, item in enumerate(value):
            item_tree = self.constant_tree(item, f"{hint}[{i}]" if hint else None, active)
            if item_tree is None:
                return None
            items.append(item_tree)
        return ("set" if t in (set, frozenset) else "seq", t.__name__, items)

    # -- expansion ----------------------------------------------------------------------------
    def _expand_function(self, node: Node, func: FunctionType) -> None:
        facts = code_facts(func.__code__, func.__globals__)
        node.local = facts.digest
        node.source = facts.source
        self.read_function(node, func, facts, "")
        owner = _owner_class(func)
        if owner is not None:
            node.refs.append(("owner", self.class_tree(owner, None)))

    def _expand_class(self, node: Node, cls: type) -> None:
        attrs = self.guards.class_dict(cls)
        own_prefix = cls.__qualname__ + "."
        methods = [
            f
            for value in attrs.values()
            for f in _underlying_functions(value)
            if isinstance(f, FunctionType) and f.__qualname__.startswith(own_prefix)
        ]
        method_lines = [(f.__code__.co_filename, f.__code__.co_firstlineno) for f in methods]
        found = class_source(cls, method_lines)
        if found is not None:
            sf, statement = found
            first, last = sf.span(statement)
            inside = [
                f
                for f in methods
                if f.__code__.co_filename == sf.filename
                and first <= f.__code__.co_firstlineno <= last
            ]
            if not all(sf.matches(f.__code__) for f in inside):
                found = None  # the file was edited after import: hash what runs
        span: tuple[str, int, int] | None = None
        if found is not None:
            sf, statement = found
            node.local = "ast:" + sf.digest(statement)
            node.source = sf.text(statement)
            span = (sf.filename, *sf.span(statement))
        else:
            node.local = "nosource:" + cls.__qualname__

        def inline(f: Any) -> bool:
            # A method written in the class body: the class's source digest covers its code.
            if span is None or not isinstance(f, FunctionType):
                return False
            code = f.__code__
            return code.co_filename == span[0] and span[1] <= code.co_firstlineno <= span[2]

        for i, base in enumerate(cls.__bases__):
            if base is not object:
                node.refs.append((f"base:{i}", self.tree(base, None)))
        if type(cls) is not type:
            node.refs.append(("metaclass", self.tree(type(cls), None)))
        for name, value in attrs.items():
            if name in _CLASS_INTERNALS or self.ignore.has_object(value):
                continue
            functions = _underlying_functions(value)
            if name.startswith("__") and name.endswith("__") and not functions:
                continue
            self.guards.bind(attrs, name, value)
            if functions and all(inline(f) for f in functions):
                node.refs.append((f"attr:{name}", (type(value).__name__,)))
                for f in functions:
                    facts = code_facts(f.__code__, f.__globals__)
                    self.read_function(node, f, facts, f"{name}.")
                continue
            node.refs.append((f"attr:{name}", self.tree(value, f"{node.base}.{name}")))
        fields = attrs.get("__dataclass_fields__")
        if isinstance(fields, dict):
            for name, fld in fields.items():
                for what in ("default", "default_factory"):
                    value = getattr(fld, what, dataclasses.MISSING)
                    if value is not dataclasses.MISSING:
                        node.refs.append((f"field:{name}.{what}", self.tree(value, None)))

    def _fall_back(self, node: Node, obj: Any, exc: Exception) -> None:
        """Key a function or class the scan failed on coarsely, by its module's text and bytecode.

        What the expansion had already read stays in ``node.refs``.
        """
        why = f"scanning it: {describe(exc)}"
        self.failures.append((node.base, why, CODE_FALLBACK))
        if isinstance(obj, FunctionType):
            node.local, node.source = code_fallback(obj.__code__, obj.__globals__, why)
        else:
            node.local, node.source = class_fallback(obj, why)

    # -- naming and hashing -------------------------------------------------------------------
    def _name_and_hash(self) -> None:
        used: set[str] = set()
        for node in self.nodes:
            symbol, n = node.base, 2
            while symbol in used:
                symbol, n = f"{node.base}#{n}", n + 1
            used.add(symbol)
            node.symbol = symbol
        for node in self.nodes:
            if node.digest:
                continue
            if node.kind == "constant":
                node.digest = encode_tree(node.tree)  # type: ignore[arg-type]
                continue
            if node.kind == "data":
                # The value keys each call; the code digest only says that it is read.
                node.digest = hash_parts(["data", node.symbol])
                continue
            entries = sorted(f"{label}={encode_tree(tree)}" for label, tree in node.refs)
            node.digest = hash_parts([node.kind, node.local, *entries])


def _is_distribution(module_name: str) -> bool:
    from .modules import distributions_by_package

    return module_name.partition(".")[0] in distributions_by_package()


def _owner_class(func: FunctionType) -> type | None:
    """The class whose body defined *func*, for a method reachable by its qualified name."""
    parts = func.__qualname__.split(".")
    if len(parts) < 2 or "<locals>" in parts:
        return None
    owner: Any = sys.modules.get(real_module(func))
    for part in parts[:-1]:
        owner = getattr(owner, "__dict__", {}).get(part)
        if owner is None:
            return None
    if not isinstance(owner, type):
        return None
    if func not in _underlying_functions(owner.__dict__.get(parts[-1])):
        return None
    return owner
