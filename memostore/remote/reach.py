"""Reaching the remotes a store looks calls up in, shared by auto-fetch and remote leases.

One process asks the same remotes on many misses: their configuration is
cached until ``config.json`` changes, their transports are opened once per
purpose, a remote that could not be reached is skipped for ``RETRY_AFTER_S``
seconds, and each kind of trouble is one :class:`MemostoreWarning` per process.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import warn
from ..transport.config import RemoteConfig, list_remotes, open_remote

if TYPE_CHECKING:
    from ..odb.store import Store
    from ..transport import Transport

RETRY_AFTER_S = 300.0

lock = threading.Lock()
# config path -> (file stamp, auto-fetch remotes); a stamp of None: no config file.
config_cache: dict[Path, tuple[Any, list[RemoteConfig]]] = {}
_transports: dict[tuple[str, str | None, str], Transport] = {}
# (url, endpoint) -> when it last failed (time.monotonic()).
down_since: dict[tuple[str, str | None], float] = {}
_warned: set[Any] = set()


def is_down(key: tuple[str, str | None]) -> bool:
    """Whether the remote at *key* failed less than ``RETRY_AFTER_S`` seconds ago."""
    since = down_since.get(key)
    return since is not None and time.monotonic() - since < RETRY_AFTER_S


def mark_up(key: tuple[str, str | None]) -> None:
    with lock:
        down_since.pop(key, None)


def auto_fetch_remotes(store: Store) -> list[RemoteConfig]:
    """The store's remotes with auto-fetch on (cached until ``config.json`` changes)."""
    path = store.config_path
    if path is None:
        return [r for r in list_remotes(store) if r.auto_fetch]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        stamp = None
    else:
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = config_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    remotes = [] if stamp is None else [r for r in list_remotes(store) if r.auto_fetch]
    with lock:
        config_cache[path] = (stamp, remotes)
    return remotes


def mark_down(key: tuple[str, str | None], remote: RemoteConfig, exc: BaseException) -> None:
    from ..transport import RemoteUnreachable

    with lock:
        down_since[key] = time.monotonic()
    what = "is unreachable" if isinstance(exc, (RemoteUnreachable, TimeoutError)) else "failed"
    warn_once(
        key,
        f"auto-fetch: remote {label(remote)} {what} ({exc}); computing locally. Results "
        "computed meanwhile are shared once you `memostore push`",
    )


def transport_for(remote: RemoteConfig, purpose: str = "fetch") -> Transport:
    """The transport of *remote* for *purpose* (its timeouts: ``open_remote``), kept per process."""
    key = (remote.url, remote.endpoint, purpose)
    with lock:
        transport = _transports.get(key)
    if transport is None:
        # Opening touches no network; S3 clients are thread-safe and reused.
        transport = open_remote(remote, purpose)
        with lock:
            transport = _transports.setdefault(key, transport)
    return transport


def label(remote: RemoteConfig) -> str:
    return f"{remote.name} ({remote.url})" if remote.name else remote.url


def warn_once(key: Any, message: str) -> None:
    with lock:
        if key in _warned:
            return
        _warned.add(key)
    warn(message)


def reset_state() -> None:
    """Forget cached configs, transports and unreachable remotes (tests)."""
    with lock:
        transports = list(_transports.values())
        config_cache.clear()
        _transports.clear()
        down_since.clear()
        _warned.clear()
    for transport in transports:
        transport.close()
