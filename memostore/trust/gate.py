"""The gate: every function, class and module a stored value names passes here.

A stored value is data. Restoring it may call only:

1. the user's own code (``__main__`` and modules outside the standard library
   and site-packages, see ``imports.py``), and only the function or class the
   value names *defined* in that module, with the digest of its dependency
   closure equal to today's (a mismatch is :class:`StaleCode`: a recompute);
2. library code the registry lists (``registry.py``);
3. code stored by value (cloudpickle), loaded only from payloads this
   machine wrote or pulled from a trusted remote (``origins.py``; checked by
   :func:`check_payload`).

Anything else raises :class:`UntrustedCode` after one warning per symbol and
process naming what would allow it; a memo hit that meets it is a miss.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from ..code.modules import STDLIB_NAMES
from ..errors import DecodeError, MalformedObject, MemostoreWarning, StaleCode
from .errors import UntrustedCode, UntrustedOrigin
from .imports import ImportRefused, import_library_module, import_user_module
from .registry import ENV_SAFE_GLOBALS, safe_globals

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore

_LOCALS = "<locals>"
_warned: set[Any] = set()
_lock = threading.Lock()


class TrustContext:
    """What the gate knows of the store a value is decoded from."""

    def __init__(self, objects: BaseObjectStore) -> None:
        self.objects = objects
        self._data_dirs: list[Path] | None = None

    @property
    def data_dirs(self) -> list[Path]:
        """Directories whose files whoever writes a store or remote controls.

        The store itself and every directory remote it is configured with or has
        pulled from: a module found there is never imported to restore a value.
        """
        if self._data_dirs is None:
            from .origins import sources_of_records, store_of

            dirs: list[Path] = []
            root = getattr(self.objects, "root", None)
            if isinstance(root, Path):
                dirs.append(root)
            urls = [s.url for s in sources_of_records(self.objects)]
            store = store_of(self.objects)
            if store is not None:
                from ..transport.config import list_remotes

                with contextlib.suppress(Exception):  # a damaged config names no directory
                    urls += [r.url for r in list_remotes(store) if r.is_directory]
            dirs += [_directory_of(url) for url in urls if _directory_of(url) is not None]
            self._data_dirs = dirs
        return self._data_dirs


def _directory_of(url: str) -> Path | None:
    from urllib.parse import unquote, urlsplit

    if url.startswith("file://"):
        return Path(unquote(urlsplit(url).path))
    if "://" not in url:
        return Path(os.path.abspath(os.path.expanduser(url)))
    return None


# -- code references --------------------------------------------------------------------------
def allow_code(
    module: str, qualname: str, digest: str | None, ctx: TrustContext, instantiate: bool = False
) -> Any:
    """The function or class ``module:qualname``, if restoring may use it.

    *instantiate*: the class is only made by ``__new__`` and given stored state
    (never called with stored arguments); then a library class that runs none of
    its own code to be restored is allowed too (:func:`restorable_from_state`).

    Raises:
        UntrustedCode: neither the user's code nor registered as safe (warned once).
        StaleCode: the user's code changed since the value was stored.
        DecodeError: it no longer exists.
    """
    found = _library_object(module, qualname)
    if found is not None:
        return found[0]
    symbol = f"{module}:{qualname}"
    if _LOCALS in qualname.split("."):
        raise DecodeError(f"{symbol} is local to a function and was not stored by value")
    if not _is_user_name(module):
        # Codec packages register what their values need as they load: load them
        # before refusing a library name (torch: the first torch value restored).
        from ..values.codecs import registry

        registry.load_entry_points()
        found = _library_object(module, qualname)
    if found is not None:
        return found[0]
    if instantiate and not _is_user_name(module):
        found = _state_class(module, qualname)
        if found is not None:
            return found
    try:
        obj = user_object(module, qualname, ctx)
    except ImportRefused as exc:
        refuse(symbol, str(exc), _safe_globals_fix(symbol) if exc.fixable else "")
    except LookupError as exc:
        raise DecodeError(f"a stored value needs {symbol}, which is gone ({exc})") from exc
    if obj is None:
        # e.g. "mymodule:os.system", or "mymodule:system" after `from os import system`.
        refuse(symbol, f"{qualname} is not a function or class that {module} defines", "")
    _check_digest(symbol, obj, digest)
    return obj


_NO_OWN_CODE_BASES: tuple[type, ...] = (object,)


def restorable_from_state(cls: Any) -> bool:
    """Whether making *cls* by ``__new__`` and giving it a state dict runs none of its code.

    True for a class of an installed library (a model, a configuration object)
    that keeps pickling's defaults: no ``__new__``, ``__setstate__``,
    ``__reduce__`` or ``__reduce_ex__`` of its own or of a base outside the
    registry, no ``__del__`` (which would run on its stored state when the value
    is dropped), and no builtin container or other C type among its bases
    (whose items a restore would add through methods the class may override).
    What such a value can still do is run its methods when the program calls
    them, on the stored state: ``docs/reliability.md`` says so.
    """
    if not isinstance(cls, type) or type(cls).__call__ is not type.__call__:
        return False
    for klass in cls.__mro__:
        if klass is object or _library_object(klass.__module__, klass.__qualname__) is not None:
            continue  # the registry vouches for this base (torch's nn.Module, say)
        if not klass.__flags__ & _HEAPTYPE:
            return False  # a type written in C: its state is not a plain dict
        if any(name in vars(klass) for name in _OWN_RESTORE_CODE):
            return False
    return True


_OWN_RESTORE_CODE = ("__new__", "__setstate__", "__reduce__", "__reduce_ex__", "__del__")
# Py_TPFLAGS_HEAPTYPE: set for classes written in Python, clear for C types.
_HEAPTYPE = 1 << 9


def _state_class(module: str, qualname: str) -> Any | None:
    """A library class ``module:qualname`` that :func:`restorable_from_state` allows.

    Its module is imported only if its top-level package already is and it is
    an installed package (not the standard library, whose classes the registry
    lists one by one): the program uses that library, so its modules may load.
    """
    top = module.partition(".")[0]
    if top not in sys.modules or top in STDLIB_NAMES or top in _OUR_PACKAGES:
        return None
    try:
        mod = sys.modules.get(module) or import_library_module(module)
        obj = _follow(mod, qualname)
    except (LookupError, ImportRefused):
        return None
    if _names_of(obj) != (module, qualname) or not isinstance(obj, type):
        return None
    if not obj.__flags__ & _HEAPTYPE:
        return None
    return obj if restorable_from_state(obj) else None


def user_object(module: str, qualname: str, ctx: TrustContext) -> Any | None:
    """``module:qualname`` of the user's code, or None when *module* does not define it.

    Raises:
        ImportRefused: the module is not the user's code, or lies where it may not run.
        LookupError: there is no such module or name.
    """
    mod = import_user_module(module, lambda: ctx.data_dirs)
    obj = _follow(mod, qualname)
    return obj if _names_of(obj) == (module, qualname) else None


def find_current(module: str, qualname: str, ctx: TrustContext) -> Any | None:
    """Today's definition of code stored by value, if restoring may use it (else None)."""
    found = _library_object(module, qualname)
    if found is not None:
        return found[0]
    if _LOCALS in qualname.split("."):
        return None
    try:
        return user_object(module, qualname, ctx)
    except (LookupError, ImportRefused):
        return None


def check_names(module: str, qualname: str) -> None:
    """Refuse names no Python module or object has (``../x``, ``a b``): MalformedObject."""
    parts = qualname.split(".")
    if not _is_dotted(module) or not all(p.isidentifier() or p in _MARKERS for p in parts):
        raise MalformedObject(f"malformed code reference {module[:80]!r}:{qualname[:80]!r}")


# The <...> parts of a qualified name: functions' locals, lambdas, comprehensions.
_MARKERS = frozenset({_LOCALS, "<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"})


def _is_dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def _check_digest(symbol: str, obj: Any, digest: str | None) -> None:
    if not digest:
        refuse(symbol, "the stored reference to the user's code carries no digest", "")
    from ..code.deps import code_info

    current = code_info(obj).digest
    if current != digest:
        raise StaleCode(symbol, str(digest), current)


# (module, qualname) -> the registry's answer, valid for one registry generation.
_answers: dict[tuple[str, str], tuple[Any] | None] = {}
_answers_generation: Any = None


def _library_object(module: str, qualname: str) -> tuple[Any] | None:
    """(object,) when the registry allows ``module:qualname``, else None (cached)."""
    global _answers_generation
    generation = safe_globals.generation
    if generation != _answers_generation:
        with _lock:
            _answers.clear()
            _answers_generation = generation
    key = (module, qualname)
    try:
        return _answers[key]
    except KeyError:
        pass
    check_names(module, qualname)  # before anything is imported; once per name
    answer = _ask_registry(module, qualname)
    with _lock:
        if _answers_generation == generation:
            _answers[key] = answer
    return answer


def _ask_registry(module: str, qualname: str) -> tuple[Any] | None:
    if module == "__main__":
        return None
    if (module, qualname) == ("builtins", "getattr"):
        return (enum_member,)  # never getattr itself: it reaches any method of anything
    try:
        if safe_globals.names_exactly(module, qualname):
            return (_follow(import_library_module(module), qualname),)
        if safe_globals.prefix_covers(module):
            obj = _follow(import_library_module(module), qualname)
            return (obj,) if _names_of(obj) == (module, qualname) else None
        for rule in safe_globals.rules_for(module):
            # A rule judges objects of modules already imported (importing its package
            # imports what its values use); it never imports a submodule by name.
            if rule.package not in sys.modules:
                import_library_module(rule.package)
            mod = sys.modules.get(module)
            if mod is None:
                continue
            obj = _follow(mod, qualname)
            if _names_of(obj) == (module, qualname) and rule.predicate(obj):
                return (obj,)
    except (LookupError, ImportRefused):
        return None
    return None


def _is_user_name(module: str) -> bool:
    from ..code.deps import is_user_module

    return module == "__main__" or is_user_module(module)


def _follow(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"{getattr(obj, '__name__', obj)!s} has no {part}") from None
    return obj


def _names_of(obj: Any) -> tuple[str, str] | None:
    from ..values.code_refs import names_of

    try:
        return names_of(obj)
    except Exception:
        return None


def enum_member(cls: Any, name: Any) -> Any:
    """``getattr(cls, name)`` for an enum member only (how Python 3.12+ pickles them)."""
    if isinstance(cls, enum.EnumMeta) and isinstance(name, str) and name in cls.__members__:
        return cls.__members__[name]
    what = f"getattr({type(cls).__name__}, {str(name)[:40]!r})"
    refuse("builtins:getattr", f"{what}: restoring only looks up enum members with getattr", "")


# -- modules ----------------------------------------------------------------------------------
def allow_module(name: str, ctx: TrustContext) -> ModuleType:
    """Module *name* as a value, if restoring may hand it out."""
    if not isinstance(name, str) or not _is_dotted(name):
        raise MalformedObject(f"malformed module node {str(name)[:80]!r}")
    if safe_globals.names_exactly(name, "") or safe_globals.prefix_covers(name):
        try:
            return import_library_module(name)
        except (LookupError, ImportRefused) as exc:
            raise DecodeError(f"a stored value holds the module {name}: {exc}") from exc
    try:
        return import_user_module(name, lambda: ctx.data_dirs)
    except ImportRefused as exc:
        fix = ""
        if exc.fixable:
            fix = (
                f"if the module is harmless as a value, allow it: memostore.add_safe_globals"
                f'(["{name}"]) before the call, or {ENV_SAFE_GLOBALS}={name}'
            )
        refuse(name, f"{exc}", fix, what="module")
    except LookupError as exc:
        raise DecodeError(f"a stored value holds the module {name}, which is gone ({exc})") from exc


# -- payloads ---------------------------------------------------------------------------------
def check_payload(symbol: str, blob_id: str, ctx: TrustContext) -> None:
    """Refuse code stored by value whose payload came from a remote that is not trusted."""
    from .origins import untrusted_origins

    untrusted = untrusted_origins(ctx.objects, blob_id)
    if not untrusted:
        return
    source, remote = untrusted[0]
    if remote is not None:
        fix = f"`memostore remote trust {remote.name}`"
        who = f"remote {remote.name} ({source.url})"
    else:
        name = source.name or "NAME"
        fix = f"`memostore remote add {name} {_plain_url(source.url)} --trusted`"
        who = f"{source.url}, a remote this store does not trust"
    message = (
        f"a stored result needs {symbol}, stored by value (pickled), which came from {who}; "
        f"pickled code from a remote runs when it is loaded, so it is not loaded and the "
        f"stored result is not used. If you trust everyone who can write there: {fix}"
    )
    _warn_once(("origin", symbol, source.key), message)
    raise UntrustedOrigin(symbol, message, fix, source.url, remote.name if remote else "")


def _plain_url(url: str) -> str:
    directory = _directory_of(url)
    return str(directory) if directory is not None else url


# -- refusing -------------------------------------------------------------------------------
def refuse(symbol: str, why: str, fix: str, what: str = "code") -> NoReturn:
    """Warn once per symbol and process, then raise UntrustedCode."""
    needs = "holds the module" if what == "module" else "needs"
    message = (
        f"a stored value {needs} {symbol}, which memostore does not run to restore a value "
        f"({why}); the stored result is not used"
    )
    if fix:
        message += f". {fix[0].upper()}{fix[1:]}"
    _warn_once((what, symbol), message)
    raise UntrustedCode(symbol, message, fix)


def _safe_globals_fix(symbol: str) -> str:
    return (
        f"if {symbol} only builds a value, allow it: memostore.add_safe_globals"
        f'(["{symbol}"]) before the call, or {ENV_SAFE_GLOBALS}={symbol}'
    )


def _warn_once(key: Any, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"memostore: {message}", MemostoreWarning, stacklevel=_caller_level())


_OUR_PACKAGES = frozenset({"memostore", "torch_codecs"})


def _caller_level() -> int:
    """The stacklevel of the first frame outside memostore and its codecs: the user's call."""
    frame = sys._getframe(2)  # the caller of _warn_once, which calls warnings.warn
    level = 2
    while frame.f_back is not None and _is_ours(frame):
        frame = frame.f_back
        level += 1
    return level


def _is_ours(frame: Any) -> bool:
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and name.partition(".")[0] in _OUR_PACKAGES
