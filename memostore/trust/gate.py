"""The gate: every function, class and module a stored value names passes here.

A stored value is data. Restoring it may use only:

1. the user's own code (``__main__`` and modules outside the standard library
   and site-packages, see ``imports.py``), and only the function or class the
   value names *defined* in that module, with the digest of its dependency
   closure equal to today's (a mismatch is :class:`StaleCode`: a recompute);
2. library code the registry lists (``registry.py``);
3. classes of a family the user enabled (``families.py``), only to be made by
   ``__new__`` and given their stored state (``state.py``);
4. code stored by value (cloudpickle), loaded only from payloads this
   machine wrote or pulled from a trusted remote (``origins.py``; checked by
   :func:`check_payload`), and only if it hashes to the digest it is stored
   under (``memostore/values/code_refs.py``).

What may be *called* with stored arguments is narrower (:func:`allow_code`,
``CALL``): the registry's callables and the user's classes, never a plain
function of the user's code nor anything decoded from the value itself.
Anything else raises :class:`UntrustedCode`, naming what would allow it; a
memo hit that meets it is a miss, warned once per function and reason.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from ..code.modules import is_user_module
from ..errors import DecodeError, MalformedObject, StaleCode
from .errors import UntrustedOrigin, refuse
from .families import ENV_STATE_FAMILIES, families
from .imports import ImportRefused, import_library_module, import_user_module
from .lookup import LOCALS, follow, is_dotted, library_object, names_or_none
from .registry import ENV_SAFE_GLOBALS, safe_globals
from .state import family_object

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore


class TrustContext:
    """What the gate knows of the store a value is decoded from.

    Attributes:
        objects: the object database the value is read from.
        code_digest: the digest of a function's or class's dependency closure
            today (``memostore.code.deps``), against which references are pinned.
        load_codecs: loads every registered codec package (they register the
            library code their values need as they load).
        roots: the ids of the documents the decoder was asked for (the value's
            roots); whether they came from a remote that is not trusted decides
            whether known state families need turning on (:meth:`value_is_ours`).

    The decoder passes the last two in, so that the gate imports neither the
    code scanner nor the codec machinery (both import values, which import it).
    """

    def __init__(
        self,
        objects: BaseObjectStore,
        code_digest: Callable[[Any], str],
        load_codecs: Callable[[], None] = lambda: None,
        roots: list[str] | None = None,
    ) -> None:
        self.objects = objects
        self.code_digest = code_digest
        self.load_codecs = load_codecs
        self.roots = roots if roots is not None else []
        self._data_dirs: list[Path] | None = None
        self._ours: tuple[tuple[str, ...], bool] | None = None

    def value_is_ours(self) -> bool:
        """Whether the value decoded came from no remote this store does not trust.

        True for what this machine stored (or pulled from a trusted remote): its
        classes are those the user's own program held, so the known state
        families restore it without being turned on. Asked only when a family's
        class is met, so a hit of anything else never reads the origin records.
        """
        roots = tuple(self.roots)
        if self._ours is None or self._ours[0] != roots:
            from .origins import untrusted_origins

            ours = bool(roots) and not any(untrusted_origins(self.objects, r) for r in roots)
            self._ours = (roots, ours)
        return self._ours[1]

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
# What a stored value does with the code a code node names (see allow_code).
VALUE = "value"
CALL = "call"
STATE = "state"


def allow_code(
    module: str, qualname: str, digest: str | None, ctx: TrustContext, use: str = VALUE
) -> Any:
    """The function or class ``module:qualname``, if restoring may use it as *use* says.

    *use* is what the stored value does with it:

    - ``VALUE``: holds it (a function or class kept in a result): the
      registry's entries and the user's code, pinned by digest;
    - ``CALL``: calls it with stored arguments (a ``reduce`` node's function,
      a ``setstate`` function): the registry's entries and the user's
      *classes*; a function of the user's code only if the registry lists it
      (``add_safe_globals``);
    - ``STATE``: makes an instance by ``__new__`` and gives it stored state:
      the registry's classes, the user's classes, and the classes of an
      enabled family (``families.py``).

    Raises:
        UntrustedCode: not allowed for this use (its message names the fix).
        StaleCode: the user's code changed since the value was stored.
        DecodeError: it no longer exists.
        MalformedObject: a name no code has, or a non-class made by ``__new__``.
    """
    symbol = f"{module}:{qualname}"
    found = library_object(module, qualname)
    if found is None and not _is_user_name(module):
        # Codec packages register what their values need as they load: load them
        # before refusing a library name (torch: the first torch value restored).
        ctx.load_codecs()
        found = library_object(module, qualname)
    if found is not None:
        return _checked_use(symbol, found[0], use, listed=True)
    if LOCALS in qualname.split("."):
        raise DecodeError(f"{symbol} is local to a function and was not stored by value")
    if not _is_user_name(module):
        in_family = family_object(module, qualname, ctx.value_is_ours)
        if in_family is not None and (use == STATE or isinstance(in_family[0], enum.EnumMeta)):
            return in_family[0]
        _refuse_library(symbol, module, use, ctx)
    try:
        obj = user_object(module, qualname, ctx)
    except ImportRefused as exc:
        refuse(symbol, str(exc), _safe_globals_fix(symbol) if exc.fixable else "")
    except LookupError as exc:
        raise DecodeError(f"a stored value needs {symbol}, which is gone ({exc})") from exc
    if obj is None:
        # e.g. "mymodule:os.system", or "mymodule:system" after `from os import system`.
        refuse(symbol, f"{qualname} is not a function or class that {module} defines", "")
    _check_digest(symbol, obj, digest, ctx)
    return _checked_use(symbol, obj, use, listed=False)


def checked_use(symbol: str, obj: Any, use: str) -> Any:
    """*obj*, the user's code restored by value, if a stored value may use it as *use*."""
    return _checked_use(symbol, obj, use, listed=False)


def _checked_use(symbol: str, obj: Any, use: str, listed: bool) -> Any:
    if use == STATE and not isinstance(obj, type):
        raise MalformedObject(f"a stored object names {symbol} as its class, which is not a class")
    if use == CALL and not listed and not isinstance(obj, type):
        refuse(
            symbol,
            "a function of your code is restored as a value, never called with stored arguments",
            f"if {symbol} only builds a value from its arguments, allow it: "
            f'memostore.add_safe_globals(["{symbol}"]) before the call',
        )
    return obj


def _refuse_library(symbol: str, module: str, use: str, ctx: TrustContext) -> NoReturn:
    """Refuse a library name the registry does not list, naming the fix that fits."""
    family = families.known_for(module)
    applies = family is not None and (
        families.enabled_for(module) is not None or ctx.value_is_ours()
    )
    if family is not None and applies and use == STATE:
        # The family applies: this class is not one it makes from state.
        why = (
            f"state family {family.name} makes only classes that subclass "
            f"{', '.join(b.partition(':')[2] for b in family.bases)} and run no code of "
            "their own to restore (no __setstate__, __reduce__, __new__ or __del__, no "
            "base written in C), and it is not one; nor is it listed as safe"
        )
        refuse(symbol, why, _safe_globals_fix(symbol))
    if family is not None and use == STATE:
        why = (
            f"{module} is a library module of state family {family.name}, which is off for "
            "values pulled from a remote this store does not trust"
        )
        fix = (
            f"if you trust whoever writes your stores and remotes to hand you "
            f"{family.package} objects, turn the family on: "
            f'memostore.trust.allow_state_family("{family.name}") before the call, or '
            f"{ENV_STATE_FAMILIES}={family.name}"
        )
        refuse(symbol, why, fix)
    refuse(symbol, f"{module} is not the user's own code", _safe_globals_fix(symbol))


def user_object(module: str, qualname: str, ctx: TrustContext) -> Any | None:
    """``module:qualname`` of the user's code, or None when *module* does not define it.

    Raises:
        ImportRefused: the module is not the user's code, or lies where it may not run.
        LookupError: there is no such module or name.
    """
    mod = import_user_module(module, lambda: ctx.data_dirs)
    obj = follow(mod, qualname)
    return obj if names_or_none(obj) == (module, qualname) else None


def find_current(module: str, qualname: str, ctx: TrustContext) -> Any | None:
    """Today's definition of code stored by value, if restoring may use it (else None)."""
    found = library_object(module, qualname)
    if found is not None:
        return found[0]
    if LOCALS in qualname.split("."):
        return None
    try:
        return user_object(module, qualname, ctx)
    except (LookupError, ImportRefused):
        return None


def _check_digest(symbol: str, obj: Any, digest: str | None, ctx: TrustContext) -> None:
    if not digest:
        refuse(symbol, "the stored reference to the user's code carries no digest", "")
    current = ctx.code_digest(obj)
    if current != digest:
        raise StaleCode(symbol, str(digest), current)


def _is_user_name(module: str) -> bool:
    return module == "__main__" or is_user_module(module)


# -- modules ----------------------------------------------------------------------------------
def allow_module(name: str, ctx: TrustContext) -> ModuleType:
    """Module *name* as a value, if restoring may hand it out."""
    if not isinstance(name, str) or not is_dotted(name):
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
    raise UntrustedOrigin(symbol, message, fix, source.url, remote.name if remote else "")


def _plain_url(url: str) -> str:
    directory = _directory_of(url)
    return str(directory) if directory is not None else url


# -- refusing -------------------------------------------------------------------------------
def _safe_globals_fix(symbol: str) -> str:
    return (
        f"if {symbol} only builds a value, allow it: memostore.add_safe_globals"
        f'(["{symbol}"]) before the call, or {ENV_SAFE_GLOBALS}={symbol}'
    )
