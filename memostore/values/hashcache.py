"""Per-process caches: object -> digest and object -> evaluation id.

A digest is reused only where the object provably has not changed since it was
computed:

* the entry holds the object itself (weakly where possible) and is dropped when
  the object dies, so a recycled ``id()`` can never alias another object;
* the entry holds the object's *fingerprint* from its codec (for a tensor: its
  version counter, storage pointer, offset, shape, stride and dtype); the
  digest is reused only while the fingerprint is equal.

Objects whose codec gives no fingerprint are never cached. Writes that bypass a
tensor's version counter (through ``.data`` or a numpy view) are invisible to
it: call :func:`forget` on the object (or ``memostore.forget_digest``) after
such a write.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class _Entry:
    ref: Any  # weakref.ref or the object itself
    fingerprint: Hashable
    digest: str
    strong: bool


class _KeyedRef(weakref.ref):
    """A weak reference that carries its object's cache key (for the death callback)."""

    __slots__ = ("key",)

    def __new__(cls, obj: Any, callback: Callable[[Any], None], key: int) -> _KeyedRef:
        self = super().__new__(cls, obj, callback)
        self.key = key
        return self

    def __init__(self, obj: Any, callback: Callable[[Any], None], key: int) -> None:
        super().__init__(obj, callback)


class HashCache:
    """object -> (fingerprint, digest), guarded by identity and fingerprint."""

    def __init__(self, max_strong: int = 512) -> None:
        self._entries: dict[int, _Entry] = {}
        # Re-entrant: death callbacks take it, and run whenever the collector does,
        # also while this thread holds it.
        self._lock = threading.RLock()
        self._strong_order: list[int] = []
        self._max_strong = max_strong
        self._on_death = self._drop_keyed

    def get(self, obj: Any, fingerprint: Hashable) -> str | None:
        entry = self._entries.get(id(obj))
        if entry is None:
            return None
        alive = entry.ref if entry.strong else entry.ref()
        if alive is not obj or entry.fingerprint != fingerprint:
            return None
        return entry.digest

    def get_if(self, obj: Any, holds: Callable[[Hashable], bool]) -> str | None:
        """The digest cached for *obj* if ``holds(its cached fingerprint)`` is True."""
        entry = self._entries.get(id(obj))
        if entry is None:
            return None
        alive = entry.ref if entry.strong else entry.ref()
        if alive is not obj or not holds(entry.fingerprint):
            return None
        return entry.digest

    def put(self, obj: Any, fingerprint: Hashable, digest: str) -> None:
        key = id(obj)
        try:
            # Runs once per restored tensor: one weakref that carries its key, and
            # one bound callback for all of them (no closure per entry).
            ref = _KeyedRef(obj, self._on_death, key)
            strong = False
        except TypeError:
            ref, strong = obj, True
        with self._lock:
            self._entries[key] = _Entry(ref, fingerprint, digest, strong)
            if strong:
                self._strong_order.append(key)
                if len(self._strong_order) > self._max_strong:
                    old = self._strong_order.pop(0)
                    entry = self._entries.get(old)
                    if entry is not None and entry.strong:
                        del self._entries[old]

    def forget(self, obj: Any) -> None:
        with self._lock:
            self._entries.pop(id(obj), None)

    def _drop_keyed(self, ref: _KeyedRef) -> None:
        with self._lock:
            entry = self._entries.get(ref.key)
            if entry is not None and entry.ref is ref:
                del self._entries[ref.key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._strong_order.clear()

    def __len__(self) -> int:
        return len(self._entries)


class LineageCache:
    """object -> id of the evaluation that produced it (weakly held).

    Objects that cannot be weakly referenced (tuples, ints) are not tracked:
    their lineage is recorded through the weakly-referencable values inside.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, str]] = {}
        # Re-entrant: death callbacks take it, and run whenever the collector does,
        # also while this thread holds it.
        self._lock = threading.RLock()

    def get(self, obj: Any) -> str | None:
        entry = self._entries.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None
        return entry[1]

    def put(self, obj: Any, evaluation_id: str) -> None:
        key = id(obj)
        try:
            ref = weakref.ref(obj, lambda r, key=key: self._drop(key, r))
        except TypeError:
            return
        with self._lock:
            self._entries[key] = (ref, evaluation_id)

    def put_tree(self, obj: Any, evaluation_id: str, limit: int = 10_000) -> None:
        """Put *obj* and everything inside its lists, tuples, sets and dicts (values).

        A result is often a container (``model, opt``; ``{"w": w}``) that the
        caller takes apart before passing a piece on: each piece must name the
        evaluation too, however deep, and whether the result was computed or
        restored. At most *limit* objects are visited.
        """
        stack, seen = [obj], 0
        while stack and seen < limit:
            item = stack.pop()
            seen += 1
            self.put(item, evaluation_id)
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple, set, frozenset)):
                stack.extend(item)

    def _drop(self, key: int, ref: weakref.ref) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


digest_cache = HashCache()
lineage_cache = LineageCache()


def forget(obj: Any) -> None:
    """Drop the cached digests of *obj* and of everything inside it.

    For use after a write the cache cannot see (through ``tensor.data``, a
    numpy view). A model's or dataset's tensors have cached digests of their
    own, reused when the model is hashed again, so they are forgotten too: the
    walk follows containers and instance ``__dict__``s (which hold a module's
    parameters, buffers and submodules), never classes, functions or modules.
    """
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _OPAQUE):
            continue
        seen.add(id(item))
        digest_cache.forget(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            state = getattr(item, "__dict__", None)
            if isinstance(state, dict):
                stack.extend(state.values())


# Never walked into by forget(): shared program state, not part of a value.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
