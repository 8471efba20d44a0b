"""Which store a memoised call uses, opened once per process and place.

``@memo(store=...)`` takes a :class:`Store`, a path, or None for the default
(``$MEMOSTORE_DIR``, else ``.memostore/`` found upward from the working
directory or made at the git root: :meth:`Store.default`). A hit must not pay
for resolving that path (two stats and pathlib work were a third of a hit), nor
use a stale store: stores are kept by what names them, the working directory
included where a relative path or the default depends on it, and a miss makes
sure the store still exists before it writes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..odb.store import ENV_STORE_DIR, Store, default_store_path

__all__ = ["open_store", "present"]

# Stores opened by this process: by what names them (a path, or $MEMOSTORE_DIR and the
# working directory for the default), and by the path that resolves to, so that a hit
# pays no stat and no path work. A deleted store is noticed before a miss writes.
_stores: dict[tuple[Any, ...], Store] = {}
_stores_by_path: dict[Path, Store] = {}
_stores_lock = threading.Lock()


def _store_key(store: str | os.PathLike[str] | None) -> tuple[Any, ...]:
    """What decides which store *store* names: the text, and the cwd where it is relative."""
    if store is None:
        env = os.environ.get(ENV_STORE_DIR) or None
        if env is not None and os.path.isabs(env):
            return (None, env)
        return (None, env, os.getcwd())
    text = os.fspath(store)
    return (text,) if os.path.isabs(text) else (text, os.getcwd())


def open_store(store: Store | str | os.PathLike[str] | None, check: bool = False) -> Store:
    """The store a call uses: *store* itself, the path it names, or the default one.

    Args:
        store: as ``@memo(store=...)`` takes it.
        check: make sure the store still exists (a miss is about to write into it);
            one that was deleted is created again.
    """
    if isinstance(store, Store):
        return store
    key = _store_key(store)
    opened = _stores.get(key)
    if opened is not None and not (check and not present(opened)):
        return opened
    path = Path(store).expanduser().absolute() if store is not None else default_store_path()
    with _stores_lock:
        opened = _stores_by_path.get(path)
        if opened is None or not present(opened):
            opened = _stores_by_path[path] = Store(path)
        _stores[key] = opened
    return opened


def present(store: Store) -> bool:
    """Whether *store*'s directory still holds a store (one in memory always does)."""
    return store.root is None or os.path.exists(os.path.join(store.root, "FORMAT"))
