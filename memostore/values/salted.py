"""Attributes that hold a salted ``hash()``: left out of a value's encoding.

Python salts the ``hash()`` of str and bytes per process (``PYTHONHASHSEED``),
so an attribute holding such a hash differs between two processes holding
equal objects, and a key that included it would never repeat in a new
process. Such attributes are caches of the object's own content (a check that
the object was not modified since it was loaded), not content: a value is
encoded without them, and restores without them. The classes that keep one
are listed here by name (importing the library is never needed), found by
keying objects of the libraries memostore is used with under two
``PYTHONHASHSEED`` values (``tests/test_hit_idioms.py``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["without_salted"]

# "module.QualName" -> attributes holding a salted hash() of the object.
SALTED: dict[str, frozenset[str]] = {
    # hash(self) of its JSON text, taken when loaded: "was it modified since?"
    "transformers.generation.configuration_utils.GenerationConfig": frozenset(
        {"_original_object_hash"}
    ),
}

_by_class: dict[type, frozenset[str]] = {}


def _salted(cls: type) -> frozenset[str]:
    found = _by_class.get(cls)
    if found is None:
        names: set[str] = set()
        for klass in getattr(cls, "__mro__", (cls,)):
            names |= SALTED.get(f"{klass.__module__}.{klass.__qualname__}", frozenset())
        found = _by_class[cls] = frozenset(names)
    return found


def without_salted(cls: type, state: Any) -> Any:
    """*state* (an object's pickled state) without the attributes holding a salted hash."""
    if not isinstance(state, dict):
        return state
    salted = _salted(cls)
    if not salted or salted.isdisjoint(state):
        return state
    return {k: v for k, v in state.items() if k not in salted}
