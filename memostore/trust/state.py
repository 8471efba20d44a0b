"""Whose code may run while a value is restored, and which library classes restore from state.

Restoring makes objects and gives them their stored state. Code runs in that
only where someone vouched for it:

- :func:`vouches_for`: a class the registry lists (``registry.py``) or a
  class of the user's own code may run its own methods while restoring
  (``__setstate__``, a list subclass's ``extend``, a dict subclass's
  ``__setitem__``): the registry vouches for the first, the user wrote the
  second. Every other class gets its state *written* into the instance
  (``memostore/values/decoding.py``), and no method of it runs.
- :func:`family_object`: a library class of a family the user enabled
  (``families.py``), made by ``__new__`` and given its state, when
  :func:`restorable_from_state` holds; an enum class of such a family, whose
  members restoring looks up (:func:`enum_by_value`) but never calls.
"""

from __future__ import annotations

import enum
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..code.modules import is_user_module
from .errors import refuse
from .families import StateFamily, families
from .imports import ImportRefused, import_library_module
from .lookup import follow, library_object, names_or_none
from .registry import safe_globals

_OWN_RESTORE_CODE = ("__new__", "__setstate__", "__reduce__", "__reduce_ex__", "__del__")
# Py_TPFLAGS_HEAPTYPE: set for classes written in Python, clear for C types.
_HEAPTYPE = 1 << 9
# Values an enum member may be looked up by without running code of the value.
_PLAIN = (str, int, float, bool, bytes, type(None))

_lock = threading.Lock()
# class -> (generations it was judged under, whether its own code may run)
_vouched: weakref.WeakKeyDictionary[type, tuple[Any, bool]] = weakref.WeakKeyDictionary()
# Classes restored by value from a payload the gate let load: the user's code.
_loaded_by_value: weakref.WeakSet[type] = weakref.WeakSet()


def vouch_loaded(obj: Any) -> None:
    """Record that class *obj* came from a payload the gate let load (the user's code)."""
    if isinstance(obj, type):
        with _lock:
            _loaded_by_value.add(obj)


def vouches_for(cls: Any) -> bool:
    """Whether the own code of class *cls* may run while a value is restored.

    True for a class the registry lists (by its own name) and for a class of
    the user's code (including one restored by value from a payload the gate
    let load). False for every other class, those of an enabled family among
    them: their instances get their state written, never applied.
    """
    if not isinstance(cls, type):
        return False
    stamp = (safe_globals.generation, families.generation)
    try:
        judged = _vouched.get(cls)
    except TypeError:  # not weak-referenceable: judge it each time
        judged = None
    if judged is not None and judged[0] == stamp:
        return judged[1]
    verdict = _judge(cls)
    try:
        with _lock:
            _vouched[cls] = (stamp, verdict)
    except TypeError:
        pass
    return verdict


def _judge(cls: type) -> bool:
    if cls in _loaded_by_value:
        return True
    names = names_or_none(cls)
    if names is None:
        return False
    module, qualname = names
    found = library_object(module, qualname)
    if found is not None:
        return found[0] is cls
    if module == "__main__":
        return True
    loaded = sys.modules.get(module)
    return loaded is not None and is_user_module(loaded)


def method_may_run(cls: type, name: str) -> bool:
    """Whether method *name* of *cls* (as its MRO resolves it) may run while restoring.

    Yes when *cls* itself is vouched for (what it inherits is part of what the
    registry or the user chose), or when the class defining the method is (an
    enabled family's model inherits ``nn.Module.__setstate__`` from torch).
    """
    if vouches_for(cls):
        return True
    for klass in cls.__mro__:
        if name in vars(klass):
            return vouches_for(klass)
    return False


def restorable_from_state(cls: Any) -> bool:
    """Whether making *cls* by ``__new__`` and writing a state into it runs none of its code.

    True for a class written in Python that keeps pickling's defaults: no
    ``__new__``, ``__setstate__``, ``__reduce__``, ``__reduce_ex__`` or
    ``__del__`` (which would run on the stored state when the value is
    dropped) of its own or of a base the registry does not list, no base
    written in C other than those the registry lists, and a metaclass that
    does not override ``__call__``. It is the condition for a class of an
    enabled family (``families.py``), not a permission by itself.
    """
    if not isinstance(cls, type) or type(cls).__call__ is not type.__call__:
        return False
    for klass in cls.__mro__:
        if klass is object:
            continue
        names = names_or_none(klass)
        if names is not None and library_object(*names) is not None:
            continue  # the registry vouches for this base (torch's nn.Module, say)
        if not klass.__flags__ & _HEAPTYPE:
            return False  # a type written in C: its state is not a plain dict
        if any(name in vars(klass) for name in _OWN_RESTORE_CODE):
            return False
    return True


def family_object(
    module: str, qualname: str, value_is_ours: Callable[[], bool] = lambda: False
) -> tuple[Any, StateFamily] | None:
    """``module:qualname`` when a family that applies covers it: a class restorable
    from state or an enum class (with the family), else None.

    An enabled family applies to every value; a known family that is not turned
    on applies to values that came from no untrusted remote (*value_is_ours*):
    what this machine stored from the user's own objects. Only the modules of a
    family that applies are imported here.
    """
    family = families.enabled_for(module)
    if family is None:
        family = families.known_for(module)
        if family is None or not value_is_ours():
            return None
    try:
        obj = follow(sys.modules.get(module) or import_library_module(module), qualname)
    except (LookupError, ImportRefused):
        return None
    if names_or_none(obj) != (module, qualname) or not isinstance(obj, type):
        return None
    if isinstance(obj, enum.EnumMeta):
        return obj, family
    if not restorable_from_state(obj) or not issubclass(obj, _bases(family)):
        return None
    return obj, family


def _bases(family: StateFamily) -> tuple[type, ...]:
    out = []
    for base in family.bases:
        module, _, qualname = base.partition(":")
        try:
            found = follow(import_library_module(module), qualname)
        except (LookupError, ImportRefused):
            continue  # not in the installed version
        if isinstance(found, type):
            out.append(found)
    return tuple(out)


def enum_by_value(cls: enum.EnumMeta, args: list[Any]) -> Any:
    """The member of enum *cls* whose value is ``args[0]``: ``cls(value)`` without a call.

    An enum class of the user's code or of the registry is called as pickle
    would (its ``_missing_`` may run: the user wrote it); any other enum's
    members are only looked up.
    """
    if len(args) == 1 and type(args[0]) in _PLAIN:
        for member in cls.__members__.values():
            value = member._value_
            if type(value) is type(args[0]) and value == args[0]:
                return member
    if vouches_for(cls):
        return cls(*args)
    symbol = f"{cls.__module__}:{cls.__qualname__}"
    refuse(symbol, f"{cls.__qualname__} has no member with the stored value", "")
