"""What the registry allows, by name: ``module:qualname`` resolved and cached.

The gate (``gate.py``) and the state rules (``state.py``) both ask "does the
registry list this function or class?"; the answer is cached per name for
one registry generation (``SafeGlobals.generation``), so that a hit restoring
thousands of objects of a few classes pays a dict lookup per code reference.
"""

from __future__ import annotations

import enum
import sys
import threading
from typing import Any

from ..code.modules import names_of
from ..errors import MalformedObject
from .errors import refuse
from .imports import ImportRefused, import_library_module
from .registry import safe_globals

_lock = threading.Lock()
# (module, qualname) -> the registry's answer, valid for one registry generation.
_answers: dict[tuple[str, str], tuple[Any] | None] = {}
_answers_generation: Any = None

# The <...> parts of a qualified name: functions' locals, lambdas, comprehensions.
LOCALS = "<locals>"
_MARKERS = frozenset({LOCALS, "<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"})


def library_object(module: str, qualname: str) -> tuple[Any] | None:
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
            return (follow(import_library_module(module), qualname),)
        if safe_globals.prefix_covers(module):
            obj = follow(import_library_module(module), qualname)
            return (obj,) if names_or_none(obj) == (module, qualname) else None
        for rule in safe_globals.rules_for(module):
            # A rule judges objects of modules already imported (importing its package
            # imports what its values use); it never imports a submodule by name.
            if rule.package not in sys.modules:
                import_library_module(rule.package)
            mod = sys.modules.get(module)
            if mod is None:
                continue
            obj = follow(mod, qualname)
            if names_or_none(obj) == (module, qualname) and rule.predicate(obj):
                return (obj,)
    except (LookupError, ImportRefused):
        return None
    return None


def check_names(module: str, qualname: str) -> None:
    """Refuse names no Python module or object has (``../x``, ``a b``): MalformedObject."""
    parts = qualname.split(".")
    if not is_dotted(module) or not all(p.isidentifier() or p in _MARKERS for p in parts):
        raise MalformedObject(f"malformed code reference {module[:80]!r}:{qualname[:80]!r}")


def is_dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def follow(obj: Any, qualname: str) -> Any:
    """``obj.a.b`` for qualname ``"a.b"``; LookupError when a part is missing."""
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"{getattr(obj, '__name__', obj)!s} has no {part}") from None
    return obj


def names_or_none(obj: Any) -> tuple[str, str] | None:
    """(module, qualname) *obj* is stored under, or None when it has none."""
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
