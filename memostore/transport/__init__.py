"""Remote transports: one interface, one implementation per kind of remote.

Open one by URL with :func:`open_transport`; see ``docs/remotes.md``.
"""

from __future__ import annotations

from ..odb.beneath import UnsafeRemotePath
from .base import (
    InvalidRemoteName,
    NotFoundOnRemote,
    RemoteError,
    RemoteObjectTooLarge,
    RemoteUnreachable,
    Transport,
    validate_name,
)
from .directory import DirectoryTransport
from .memory import MemoryTransport
from .s3 import S3Transport
from .url import open_transport

__all__ = [
    "DirectoryTransport",
    "InvalidRemoteName",
    "MemoryTransport",
    "NotFoundOnRemote",
    "RemoteError",
    "RemoteObjectTooLarge",
    "RemoteUnreachable",
    "S3Transport",
    "Transport",
    "UnsafeRemotePath",
    "open_transport",
    "validate_name",
]
