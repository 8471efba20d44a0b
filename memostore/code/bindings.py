"""What the code of a closure reads: globals, imports, closure cells and default values.

Each value read enters the closure in one of four ways:

* code (a function, class or module): followed, a dependency of its own;
* a constant (``graph.Closure.constant_tree``): hashed by value into
  the code digest, and re-checked on every call;
* data (anything else that is not a service): a dependency of kind
  ``"data"`` whose value is *not* in the code digest; the memoize layer reads
  it at every call and keys the call by it (``CodeInfo.data_globals``);
* a service (``global_kinds.SERVICE_TYPES``): kind ``"object"``, by type only.

A name some function rebinds with ``global`` (a cell rebound with
``nonlocal``) is read at every call even when it holds a constant now: a
counter or a best loss changes between calls, so it is data unless it holds
a service.

A failure while reading one binding (an object whose attributes raise) is
recorded in ``failures`` and the binding is keyed as data, so the call still
runs and is keyed by what the code read.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Mapping
from types import FunctionType, MethodType, ModuleType
from typing import Any

import blake3

from .bytecode import LocalImport
from .fallback import CODE_FALLBACK, VALUE_FALLBACK, describe, file_text_digest
from .global_kinds import CellView, DefaultView, service_kind
from .modules import is_user_module
from .source import CodeFacts, source_file
from .values import (
    BUILTIN_CALLABLES,
    MISSING,
    Guards,
    IgnoreRules,
    Tree,
    function_symbol,
    real_module,
    render_constant,
    type_name,
)

__all__ = ["Bindings", "bound_to_instance", "is_code", "wrapped_of"]

_CODE_LIKE = (FunctionType, type, ModuleType, MethodType, functools.partial)


def wrapped_of(value: Any) -> Any:
    """``value.__wrapped__`` when it is set on the object itself (a ``functools.wraps`` wrapper)."""
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return attrs.get("__wrapped__", MISSING)
    return MISSING


def bound_to_instance(value: Any) -> bool:
    """A method bound to an instance (not a class or module): it carries the instance's state."""
    return isinstance(value, MethodType) and not isinstance(value.__self__, (type, ModuleType))


def is_code(value: Any) -> bool:
    """Whether a global's value is followed as code rather than hashed or keyed as data."""
    if bound_to_instance(value):
        return False
    return (
        isinstance(value, (*_CODE_LIKE, *BUILTIN_CALLABLES))
        # A decorated function (``@memo``, ``lru_cache``): the wrapper's type
        # and the user's function inside, which keeps the symbol.
        or wrapped_of(value) is not MISSING
    )


class Bindings:
    """Reading the bindings of functions into a closure (a part of ``Closure``)."""

    # Set by Closure.__init__; the methods named in ``_closure_api`` are Closure's.
    ignore: IgnoreRules
    guards: Guards
    failures: list[tuple[str, str, str]]
    _by_key: dict[Any, Any]
    _state_names: dict[int, frozenset[str]]
    _saw_mutable: bool
    _add: Callable[..., Any]
    tree: Callable[[Any, str | None], Tree]
    constant_tree: Callable[[Any, str | None, set[int]], Tree | None]
    object_tree: Callable[[Any, str | None], Tree]
    python_tree: Callable[[], Tree]
    module_tree: Callable[[ModuleType], Tree]
    unimported_tree: Callable[[str], Tree]
    external_tree: Callable[[str | None], Tree]

    def binding_tree(
        self, namespace: dict[str, Any], module: str, name: str, value: Any, state: frozenset[str]
    ) -> Tree:
        """A global read by the user's code: the code it names, a constant, data or a service."""
        symbol = f"{module}:{name}"
        if name not in state and is_code(value):
            return self.tree(value, symbol)
        key = ("binding", id(namespace), name)
        node = self._by_key.get(key)
        if node is not None:
            return ("ref", node)
        self._saw_mutable = False
        plain = name not in state and not bound_to_instance(value)
        found = self.constant_tree(value, symbol, set()) if plain else None
        if found is None:
            return self.value_tree(key, symbol, name, value, namespace)
        node = self._add(key, "constant", symbol, value)
        node.tree = found
        node.refs.append(("value", found))
        node.source = f"{name} = {render_constant(value)}"
        if self._saw_mutable:
            self.guards.snapshot(value)
        return ("ref", node)

    def value_tree(
        self, key: Any, symbol: str, name: str, value: Any, namespace: Mapping[str, Any]
    ) -> Tree:
        """A value that is not constant-like: a service (by type) or data (keyed at each call).

        Args:
            key: What identifies the binding within the closure.
            symbol: The dependency's symbol.
            name: The name the code reads, and the key of *namespace* holding the value.
            value: The value now.
            namespace: Where the value is read at each call: a module's globals
                dict, or a view of a closure cell or of a default value.
        """
        node = self._by_key.get(key)
        if node is not None:
            return ("ref", node)
        what = type_name(type(value))
        if service_kind(value) is not None:
            node = self._add(key, "object", symbol, value)
            node.digest = blake3.blake3(what.encode()).hexdigest()
            node.refs.append(("type", self.object_tree(value, symbol)))
            node.source = f"{name}: {what} (service object: not keyed)"
            return ("ref", node)
        node = self._add(key, "data", symbol)
        node.data = (namespace, name)
        node.source = f"{name}: {what} (keyed by value at each call)"
        # The value's class is code the call runs, so it stays a dependency.
        if isinstance(value, MethodType):
            node.refs.append(("func", self.tree(value.__func__, symbol)))
            node.refs.append(("type", self.object_tree(value.__self__, None)))
        else:
            node.refs.append(("type", self.object_tree(value, symbol)))
        if isinstance(namespace, dict):
            self.guards.bind_type(namespace, name, value)
        return ("ref", node)

    def _failed_binding(
        self,
        node: Any,
        label: str,
        exc: Exception,
        namespace: Mapping[str, Any],
        module: str,
        name: str,
    ) -> None:
        """Record a failure reading one binding, and key that binding as data at each call."""
        self.failures.append((node.base, f"reading {label}: {describe(exc)}", VALUE_FALLBACK))
        value = namespace.get(name, MISSING)
        if value is MISSING:
            return
        if isinstance(value, ModuleType):
            tree = self.module_text_tree(value.__name__) if is_user_module(value) else None
            if tree is not None:
                node.refs.append((label, tree))
            return
        key = ("failed", id(namespace), name)
        node.refs.append((label, self.value_tree(key, f"{module}:{name}", name, value, namespace)))

    def module_text_tree(self, name: str) -> Tree:
        """A user module hashed by its whole file text (for code whose scan failed)."""
        node = self._by_key.get(("module-text", name))
        if node is None:
            node = self._add(("module-text", name), "module", name)
            module = sys.modules.get(name)
            file = getattr(module, "__file__", None)
            node.digest = file_text_digest(
                file if isinstance(file, str) else None, getattr(module, "__dict__", None)
            )
        return ("ref", node)

    def _module_state(self, namespace: dict[str, Any]) -> frozenset[str]:
        """Names some function of the module rebinds with ``global``: read at every call."""
        found = self._state_names.get(id(namespace))
        if found is None:
            file = namespace.get("__file__")
            sf = source_file(file, namespace) if isinstance(file, str) else None
            found = sf.global_decls if sf is not None else frozenset()
            self._state_names[id(namespace)] = found
        return found

    def _follow(
        self,
        namespace: dict[str, Any],
        module: str,
        name: str,
        value: Any,
        path: list[str],
        attrs: tuple[str, ...],
        state: frozenset[str],
        dynamic: bool = True,
    ) -> Tree | None:
        """Resolve ``value.attr.attr...`` through the user's modules; None when ignored.

        *path* starts as the label of the first name and gets each attribute followed.
        *dynamic*: a user module reached at the end is used as an object, not
        only read attributes of (see :meth:`members_tree`).
        """
        for attr in attrs:
            if not (isinstance(value, ModuleType) and is_user_module(value)):
                break
            if self.ignore.has_name(value.__name__, attr):
                return None
            inner = value.__dict__
            found = inner.get(attr, MISSING)
            self.guards.bind(inner, attr, found)
            if found is MISSING:
                break
            namespace, module, name, value = inner, value.__name__, attr, found
            state = self._module_state(inner)
            path.append(attr)
        if self.ignore.has_object(value):
            return None
        if dynamic and isinstance(value, ModuleType) and is_user_module(value):
            # The module itself escapes (``getattr(models, arch)``, ``models.__dict__[arch]``,
            # ``vars(models)``): any of its attributes may be read.
            return self.members_tree(value)
        return self.binding_tree(namespace, module, name, value, state)

    def members_tree(self, module: ModuleType) -> Tree:
        """Every attribute of a user module, for code that reads them by a computed name.

        Over-invalidation, never a stale hit: an edit of any function or class the
        module holds changes the digest, whichever one the code picks at run time.
        """
        key = ("members", id(module))
        node = self._by_key.get(key)
        if node is not None:
            return ("ref", node)
        name = module.__name__
        node = self._add(key, "module", f"{name}.*", module)
        node.local = "members"
        node.source = (
            f"# every attribute of {name}: the code reads them by a computed name "
            "(getattr, __dict__, vars, globals())"
        )
        namespace = module.__dict__
        self.guards.namespace_size(namespace)
        state = self._module_state(namespace)
        for attr in sorted(k for k in namespace if isinstance(k, str)):
            if attr.startswith("__") and attr.endswith("__"):
                continue
            value = namespace[attr]
            self.guards.bind(namespace, attr, value)
            if self.ignore.has_name(name, attr) or self.ignore.has_object(value):
                continue
            label = f"attr:{attr}"
            try:
                if isinstance(value, ModuleType):
                    tree = self.module_tree(value)  # its own attributes only if read there
                else:
                    tree = self.binding_tree(namespace, name, attr, value, state)
            except Exception as exc:
                self._failed_binding(node, label, exc, namespace, name, attr)
                continue
            node.refs.append((label, tree))
        return ("ref", node)

    def _record(
        self,
        node: Any,
        label: str,
        namespace: dict[str, Any],
        module: str,
        name: str,
        value: Any,
        attrs: tuple[str, ...],
        state: frozenset[str],
        dynamic: bool = True,
    ) -> None:
        path = [label]
        try:
            tree = self._follow(namespace, module, name, value, path, attrs, state, dynamic)
        except Exception as exc:
            self._failed_binding(node, label, exc, namespace, module, name)
            return
        if tree is not None:
            node.refs.append((".".join(path), tree))

    def _read_globals(self, node: Any, func: FunctionType, facts: CodeFacts, prefix: str) -> None:
        namespace = func.__globals__
        module = real_module(func)
        state = self._module_state(namespace) | facts.stored_globals
        for chain in facts.chains:
            name = chain[0]
            if self.ignore.has_name(module, name):
                continue
            value = namespace.get(name, MISSING)
            self.guards.bind(namespace, name, value)
            label = f"{prefix}global:{name}"
            if value is MISSING:
                builtins = namespace.get("__builtins__")
                builtins = getattr(builtins, "__dict__", builtins)
                if isinstance(builtins, dict) and name in builtins:
                    if not self.ignore.has_object(builtins[name]):
                        node.refs.append((label, self.python_tree()))
                    own = sys.modules.get(module)
                    if name == "globals" and isinstance(own, ModuleType) and is_user_module(own):
                        # ``globals()[name]``: the module's own attributes, by computed name.
                        node.refs.append((f"{label}()", self.members_tree(own)))
                elif not facts.fallback_names:  # there, most names are attributes, not globals
                    node.refs.append((label, ("unbound",)))
                continue
            if facts.fallback_names and isinstance(value, ModuleType) and is_user_module(value):
                # The scan failed, so the attributes read on the module are not known.
                node.refs.append((f"{label}.*", self.module_text_tree(value.__name__)))
            self._record(node, label, namespace, module, name, value, chain[1:], state)

    def _read_fallback_imports(self, node: Any, func: FunctionType, facts: CodeFacts) -> None:
        """Every user module a name of the code could import, hashed whole (the scan failed)."""
        package = func.__globals__.get("__package__") or ""
        parents = (
            [package.rsplit(".", i)[0] for i in range(package.count(".") + 1)] if package else []
        )
        for name in facts.fallback_names:
            for candidate in (name, *(f"{p}.{name}" if name else p for p in parents)):
                module = sys.modules.get(candidate)
                if isinstance(module, ModuleType) and is_user_module(module):
                    node.refs.append((f"import:{candidate}.*", self.module_text_tree(candidate)))

    def _read_imports(self, node: Any, func: FunctionType, facts: CodeFacts, prefix: str) -> None:
        if facts.fallback_names:
            self._read_fallback_imports(node, func, facts)
        if not facts.imports:
            return
        bound: dict[str, tuple[Any, dict[str, Any], str, str] | None] = {}
        for local, imp in facts.imports:
            label = f"{prefix}import:{local}"
            name = _absolute(imp, func.__globals__)
            module = sys.modules.get(name) if name else None
            if name:
                self.guards.bind(sys.modules, name, MISSING if module is None else module)
            if module is None:
                node.refs.append((label, self.unimported_tree(name) if name else ("unbound",)))
                bound[local] = None
                continue
            if not is_user_module(module):
                # An installed package counts by its distribution's version alone, as when
                # it is not imported yet: never by what else the program imported (which
                # decides whether it is, and what its names are bound to by then).
                node.refs.append((label, self.external_tree(name)))
                bound[local] = None
                continue
            escapes = (local,) in facts.import_chains  # used as an object, not only its attributes
            if imp.attr is None:
                if not imp.submodule:
                    top = name.partition(".")[0]
                    module = sys.modules.get(top, module)
                bound[local] = (module, sys.modules, module.__name__, module.__name__)
                node.refs.append((label, self.module_tree(module)))
                if escapes and is_user_module(module):
                    node.refs.append((f"{label}.*", self.members_tree(module)))
                continue
            value = module.__dict__.get(imp.attr, MISSING)
            self.guards.bind(module.__dict__, imp.attr, value)
            if value is MISSING:
                value = sys.modules.get(f"{name}.{imp.attr}", MISSING)
            if value is MISSING:
                node.refs.append((label, ("unbound",)))
                bound[local] = None
                continue
            bound[local] = (value, module.__dict__, module.__name__, imp.attr)
            state = self._module_state(module.__dict__)
            self._record(
                node, label, module.__dict__, module.__name__, imp.attr, value, (), state, escapes
            )
        for chain in facts.import_chains:
            start = bound.get(chain[0])
            if start is None or len(chain) < 2:
                continue
            value, namespace, module_name, name = start
            label = f"{prefix}import:{chain[0]}"
            state = self._module_state(namespace) if namespace is not sys.modules else frozenset()
            self._record(node, label, namespace, module_name, name, value, chain[1:], state)

    def read_function(self, node: Any, func: FunctionType, facts: CodeFacts, prefix: str) -> None:
        """Globals, imports, closure cells, defaults and wrapped function of *func*."""
        if facts.failure is not None:
            self.failures.append((function_symbol(func), facts.failure, CODE_FALLBACK))
        self._read_globals(node, func, facts, prefix)
        self._read_imports(node, func, facts, prefix)
        symbol = function_symbol(func)
        for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
            label = f"{prefix}cell:{name}"
            try:
                value = cell.cell_contents
            except ValueError:
                node.refs.append((label, ("empty",)))
                continue
            if self.ignore.has_object(value):
                continue
            view = CellView(cell, name)
            # A cell some code rebinds with ``nonlocal`` is state: read at every call.
            rebound = name in facts.stored_derefs
            self._read_value(node, label, ("cell", id(cell)), f"{symbol}.<{name}>", view, rebound)
        code = func.__code__
        params = code.co_varnames[: code.co_posonlyargcount + code.co_argcount]
        defaults = func.__defaults__ or ()
        for i in range(len(defaults)):
            at = len(params) - len(defaults) + i
            param = params[at] if 0 <= at < len(params) else str(i)
            view = DefaultView(func, param, i)
            key = ("default", id(func), param)
            self._read_value(node, f"{prefix}default:{i}", key, f"{symbol}.<{param}>", view, False)
        for name in sorted(func.__kwdefaults__ or {}):
            view = DefaultView(func, name, None)
            key = ("default", id(func), name)
            self._read_value(
                node, f"{prefix}kwdefault:{name}", key, f"{symbol}.<{name}>", view, False
            )
        wrapped = wrapped_of(func)
        if wrapped is not MISSING:
            node.refs.append((f"{prefix}wrapped", self.tree(wrapped, None)))

    def _read_value(
        self, node: Any, label: str, key: Any, symbol: str, view: Mapping[str, Any], rebound: bool
    ) -> None:
        """A closure cell or default value: a constant, code, data or a service."""
        (name,) = view
        value = view[name]
        try:
            plain = not rebound and not bound_to_instance(value)
            found = self.constant_tree(value, symbol, set()) if plain else None
            if found is None and plain and is_code(value):
                found = self.tree(value, symbol)
            if found is None:
                found = self.value_tree(key, symbol, name, value, view)
        except Exception as exc:
            self.failures.append((node.base, f"reading {label}: {describe(exc)}", VALUE_FALLBACK))
            found = self.value_tree(("failed", key), symbol, name, value, view)
        node.refs.append((label, found))


def _absolute(imp: LocalImport, namespace: dict[str, Any]) -> str | None:
    if imp.level == 0:
        return imp.module
    package = namespace.get("__package__") or namespace.get("__name__", "")
    try:
        return importlib.util.resolve_name("." * imp.level + imp.module, package)
    except (ImportError, ValueError):
        return None
