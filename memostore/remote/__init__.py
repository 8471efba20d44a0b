"""Sharing a store through remotes: configuration, push, pull and auto-fetch.

See ``docs/remotes.md``. The transports themselves live in
:mod:`memostore.transport`; this package decides what to move.
"""

from __future__ import annotations

from .config import (
    RemoteConfig,
    RemoteNotFound,
    add_remote,
    get_remote,
    list_remotes,
    open_remote,
    remove_remote,
)
from .fetch import fetch_on_miss
from .sync import SyncReport, pull, push
from .transfer import CorruptRemoteObject, TransferProgress

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
]
