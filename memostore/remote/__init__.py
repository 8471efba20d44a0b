"""Sharing a store through remotes: configuration, push, pull and auto-fetch.

See ``docs/remotes.md``. The transports themselves live in
:mod:`memostore.transport`; this package decides what to move.

Names are imported on first use: ``@memo`` asks :func:`fetch_on_miss` on every
local miss, and with no remote configured that must not pull in the
transports (or boto3).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..transport.config import (
        RemoteConfig,
        RemoteNotFound,
        add_remote,
        get_remote,
        list_remotes,
        open_remote,
        remove_remote,
        set_remote_trust,
    )
    from .fetch import fetch_on_miss
    from .sync import SyncReport, pull, push
    from .transfer import CorruptRemoteObject, TransferProgress

_WHERE = {
    "RemoteConfig": "memostore.transport.config",
    "RemoteNotFound": "memostore.transport.config",
    "add_remote": "memostore.transport.config",
    "get_remote": "memostore.transport.config",
    "list_remotes": "memostore.transport.config",
    "open_remote": "memostore.transport.config",
    "remove_remote": "memostore.transport.config",
    "set_remote_trust": "memostore.transport.config",
    "fetch_on_miss": "memostore.remote.fetch",
    "SyncReport": "memostore.remote.sync",
    "pull": "memostore.remote.sync",
    "push": "memostore.remote.sync",
    "CorruptRemoteObject": "memostore.remote.transfer",
    "TransferProgress": "memostore.remote.transfer",
}

__all__ = [
    "CorruptRemoteObject",
    "RemoteConfig",
    "RemoteNotFound",
    "SyncReport",
    "TransferProgress",
    "add_remote",
    "fetch_on_miss",
    "get_remote",
    "list_remotes",
    "open_remote",
    "pull",
    "push",
    "remove_remote",
    "set_remote_trust",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
