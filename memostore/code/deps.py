"""Code digests: what a function depends on, and one digest for all of it.

``code_info(f)`` walks the transitive closure of the user's code that *f*
uses -- globals and module constants, helpers in any of the user's modules,
attributes read through ``import pkg.mod as m``, closure cells, default
values, classes with their methods, attributes and bases -- and stops at
installed packages, which are pinned by distribution version, and at the
standard library, pinned by the Python version. ``docs/code-dependencies.md``
states the rules; in short:

* a function's or class's own digest is that of its syntax tree without
  docstrings, comments, formatting or line numbers (its normalised bytecode
  when no source exists);
* a global is hashed by value into the digest when it is constant-like
  (scalars, enums, and builtin containers of those, of functions and of
  classes);
* any other global holds *data* (a model, a tensor, an optimizer, parsed
  arguments): it is listed in ``CodeInfo.data_globals`` and keyed by its
  value at every call by the memoize layer, not by the code digest; only
  *service* objects (loggers, writers, locks, files, progress bars: see
  ``code.global_kinds.SERVICE_TYPES``) enter by their type's name alone;
* :func:`ignore_global` leaves a global out altogether.

Results are cached per function object and re-checked on each call against
every global binding the closure read, so rebinding a constant (re-running
a notebook cell) is seen. A failure inside the scanner never breaks the
call: the code it failed on is keyed coarsely (see ``code.fallback``) and
a :class:`~memostore.errors.MemostoreWarning` names it.
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import CodeType, FunctionType, MethodType
from typing import Any, TypeVar

import blake3

from ..errors import warn
from ..odb.objects import hash_parts
from .fallback import CODE_FALLBACK, class_fallback, code_fallback, describe
from .graph import Closure
from .modules import is_user_module
from .values import IgnoreRules

__all__ = [
    "CodeInfo",
    "DataGlobal",
    "Dependency",
    "code_info",
    "data_globals",
    "ignore_global",
    "is_user_module",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Dependency:
    """One piece of code or data a function depends on.

    Attributes:
        symbol: ``"pkg.mod:Qual.name"`` for functions, classes, constants and
            other objects read from a module; ``"dist:NAME"`` for an installed
            distribution; ``"python"`` for the standard library and builtins;
            a dotted module name for a module imported inside a function body
            that had not been imported yet.
        kind: ``"function"``, ``"class"``, ``"constant"``, ``"data"`` (a
            value keyed at each call, see :class:`DataGlobal`; its digest
            covers its symbol and kind only), ``"object"`` (a service object,
            by type only), ``"distribution"``, ``"python"`` or ``"module"``.
        digest: 64-hex blake3 digest.
        source: Source text for diffs (a constant's rendered value, a data or
            service object's type); None for distributions and Python, and
            for code without source. Code the scanner failed on has a source
            that starts with ``# not scanned (...)`` and says how it was keyed.
    """

    symbol: str
    kind: str
    digest: str
    source: str | None


@dataclass(frozen=True)
class DataGlobal:
    """A value the closure's code reads that keys each call by its value (not by the code digest).

    The caller reads ``namespace[name]`` (or :meth:`read`) at every call and
    hashes it as an implicit argument: a module-level model, optimizer,
    loader or ``args`` read by the function or by any helper, method or
    class of its closure.

    Attributes:
        symbol: The dependency's symbol in ``CodeInfo.deps`` (kind ``"data"``):
            ``"module:name"`` for a module global, ``"module:qualname.<name>"``
            for a closure cell or a parameter's default value.
        namespace: Where the value lives: the module's globals dict for a
            global; for a cell or a default, a read-only live view of it (a
            ``Mapping`` with the one key *name*). Excluded from ``==`` and hashing.
        name: The key of the value in *namespace*.
    """

    symbol: str
    namespace: Mapping[str, Any] = field(compare=False, hash=False, repr=False)
    name: str

    def read(self) -> Any:
        """The value now (``KeyError`` when it was deleted)."""
        return self.namespace[self.name]


@dataclass(frozen=True)
class CodeInfo:
    """The dependency closure of a function or class.

    Attributes:
        symbol: The root's symbol, ``"module:qualname"``.
        digest: 64-hex blake3 over the root symbol and every dependency's
            ``(symbol, kind, digest)``, sorted by symbol.
        deps: Every dependency, the root included, keyed by symbol.
        data_globals: The values to key each call by, sorted by symbol: one
            per dependency of kind ``"data"``.
    """

    symbol: str
    digest: str
    deps: dict[str, Dependency]
    data_globals: tuple[DataGlobal, ...] = ()


_ignore = IgnoreRules()
_lock = threading.RLock()


class _Entry:
    __slots__ = ("check", "generation", "info", "ref", "state")

    def __init__(
        self,
        ref: Callable[[], Any],
        info: CodeInfo,
        check: Callable[[], bool],
        state: Callable[[], Any],
    ) -> None:
        self.ref = ref
        self.info = info
        self.check = check
        self.state = state  # the root's own code, defaults, ... as first seen
        self.generation = _ignore.generation


# id(root) -> entry; the entry holds a weak reference (or the object itself
# when it cannot be weakly referenced) so a reused id is never mistaken.
_entries: dict[int, _Entry] = {}


def _drop(key: int, ref: weakref.ref[Any]) -> None:
    entry = _entries.get(key)
    if entry is not None and entry.ref is ref:
        del _entries[key]


def _strong(obj: Any) -> Callable[[], Any]:
    return lambda: obj


def _root_state(root: Any) -> Callable[[], Any]:
    """Attributes of the root that are rebound in place (``%autoreload`` patches ``__code__``)."""
    if isinstance(root, FunctionType):
        expected = (root.__code__, root.__defaults__, root.__kwdefaults__)
        return lambda: (
            root.__code__ is expected[0]
            and root.__defaults__ is expected[1]
            and root.__kwdefaults__ is expected[2]
        )
    return lambda: True


def code_info(obj: Any) -> CodeInfo:
    """The dependency closure of *obj* and its digest.

    Args:
        obj: A function, lambda, method (its function is used; the instance is
            not code), class or ``functools.partial`` (the bound arguments
            count as code). A third-party or builtin callable gives a closure
            that pins its distribution.

    Returns:
        The closure. The first call per object builds it; later calls return
        the cached result after checking that no global binding it read has
        been rebound (for a data global, that its value's type is the same:
        the value keys each call, see ``CodeInfo.data_globals``), that the
        root's code and defaults are the same objects, that no class in it
        gained, lost or replaced an attribute, and that mutable constants
        (lists, dicts, sets) still compare equal.

        A failure inside the scanner does not raise: what it failed on is
        keyed by its module's whole text and its bytecode, and named in one
        :class:`~memostore.errors.MemostoreWarning`.

    Raises:
        TypeError: *obj* is not code.
    """
    if type(obj) is MethodType or isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    elif type(obj) is not FunctionType and not isinstance(obj, (type, functools.partial)):
        obj = _unwrap(obj)
    entry = _entries.get(id(obj))
    if (
        entry is not None
        and entry.ref() is obj
        and entry.generation == _ignore.generation
        and entry.state()
        and entry.check()
    ):
        return entry.info
    if not (callable(obj) or isinstance(obj, type)):
        raise TypeError(
            f"code_info() takes a function, method, class or functools.partial, "
            f"not {type(obj).__qualname__}"
        )
    with _lock:
        info, check = _build(obj)
        try:
            key = id(obj)
            ref: Callable[[], Any] = weakref.ref(obj, lambda r, key=key: _drop(key, r))
        except TypeError:
            ref = _strong(obj)
        _entries[id(obj)] = _Entry(ref, info, check, _root_state(obj))
    return info


def _unwrap(obj: Any) -> Any:
    """The function inside a callable wrapper object (``@memo``, ``lru_cache``)."""
    for _ in range(100):
        attrs = getattr(obj, "__dict__", None)
        wrapped = attrs.get("__wrapped__") if isinstance(attrs, dict) else None
        if wrapped is None or isinstance(obj, FunctionType):
            return obj
        obj = wrapped
    return obj


def _build(obj: Any) -> tuple[CodeInfo, Callable[[], bool]]:
    closure = Closure(_ignore, _value_digester())
    try:
        root = closure.build(obj)
    except Exception as exc:  # the scanner itself failed: key the root coarsely
        return _fallback_info(obj, closure.failures, exc), lambda: True
    deps = {
        node.symbol: Dependency(node.symbol, node.kind, node.digest, node.source)
        for node in closure.nodes
    }
    data = tuple(
        DataGlobal(node.symbol, node.data[0], node.data[1])
        for node in sorted(closure.nodes, key=lambda n: n.symbol)
        if node.kind == "data" and node.data is not None
    )
    info = CodeInfo(root.symbol, _closure_digest(root.symbol, deps), deps, data)
    _warn(closure.failures)
    return info, closure.guards.checker()


def _closure_digest(root: str, deps: dict[str, Dependency]) -> str:
    listing = [[symbol, deps[symbol].kind, deps[symbol].digest] for symbol in sorted(deps)]
    text = json.dumps({"root": root, "deps": listing}, separators=(",", ":"))
    return blake3.blake3(text.encode()).hexdigest()


def _fallback_info(obj: Any, failures: list[tuple[str, str, str]], exc: Exception) -> CodeInfo:
    """A closure of the root alone, keyed by its module's text and bytecode."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    symbol = f"{module if isinstance(module, str) else '<unknown>'}:{qualname}"
    why = f"building its closure: {describe(exc)}"
    func = getattr(obj, "func", obj)  # a functools.partial: its function
    if isinstance(obj, type):
        local, source = class_fallback(obj, why)
        kind = "class"
    elif isinstance(getattr(func, "__code__", None), CodeType):
        local, source = code_fallback(func.__code__, getattr(func, "__globals__", None), why)
        kind = "function"
    else:
        local, source, kind = f"fallback:{id(obj)}", f"# not scanned ({why})\n", "function"
    deps = {symbol: Dependency(symbol, kind, hash_parts([kind, local]), source)}
    _warn([*failures, (symbol, why, CODE_FALLBACK)])
    return CodeInfo(symbol, _closure_digest(symbol, deps), deps)


_warned: set[tuple[str, str]] = set()


def _warn(failures: list[tuple[str, str, str]]) -> None:
    """One warning per function (or binding) the scanner failed on, once per process."""
    for symbol, why, instead in failures:
        if (symbol, why) in _warned:
            continue
        _warned.add((symbol, why))
        warn(f"could not scan the code of {symbol} ({why}); {instead}")


def data_globals(obj: Any) -> tuple[DataGlobal, ...]:
    """What keys each call of *obj* besides its arguments: ``code_info(obj).data_globals``.

    As cheap as :func:`code_info` after its first call: the closure is cached.
    """
    return code_info(obj).data_globals


def ignore_global(obj_or_name: T) -> T:
    """Leave a global out of every code closure; returns its argument (a decorator).

    Use it for module-level state whose value must not key a call: a debug
    flag, a cache, a handle. Changing an ignored global never changes a
    digest, and it does not appear in ``deps``.

    Args:
        obj_or_name: The object itself (matched by identity wherever a closure
            would read it: globals, closure cells, defaults, class attributes),
            ``"pkg.mod:NAME"`` for one module's global, or ``"NAME"`` for a
            global of that name in any module.

    Example:
        >>> @ignore_global
        ... def log_progress(step): ...
        >>> ignore_global("mypkg.train:VERBOSE")
        'mypkg.train:VERBOSE'
    """
    with _lock:
        _ignore.add(obj_or_name)
    return obj_or_name


# -- value digests ------------------------------------------------------------------------------

# A data global is keyed by the digest of its value, which the values wing
# computes; code sits below values, so values hands its digest function in
# (``use_value_digest``) when it is imported, which ``import memostore`` does.
_digester: Callable[[Any], str] | None = None


def use_value_digest(digest_value: Callable[[Any], str]) -> None:
    """Key data globals by *digest_value* (``memostore.values.hashing`` registers it)."""
    global _digester
    _digester = digest_value


def _value_digester() -> Callable[[Any], str]:
    if _digester is None:
        raise RuntimeError("memostore.code.deps needs memostore.values.hashing: import memostore")
    return _digester
