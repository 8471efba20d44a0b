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
    "RemoteConfig": "config",
    "RemoteNotFound": "config",
    "add_remote": "config",
    "get_remote": "config",
    "list_remotes": "config",
    "open_remote": "config",
    "remove_remote": "config",
    "set_remote_trust": "config",
    "fetch_on_miss": "fetch",
    "SyncReport": "sync",
    "pull": "sync",
    "push": "sync",
    "CorruptRemoteObject": "transfer",
    "TransferProgress": "transfer",
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
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
