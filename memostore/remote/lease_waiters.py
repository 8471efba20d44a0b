"""Waiters' markers beside a remote lease: who waits, so that the holder publishes.

A process that waits for a remote lease held on another machine writes a
marker ``<lease>.waiting/<host>-<pid>-<random>`` beside it (``<lease>`` is
``leases/<function>/<call key>``), a small JSON record: host, pid, since (when
it began to wait, its clock) and the id of the lease it waits for. The holder,
done, lists that prefix: a marker there means someone waits and the result
must be published; none, and nothing is uploaded. The protocol around it
(when each side writes, lists and deletes) is in ``remote/leases.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..odb import lockfile

if TYPE_CHECKING:
    from ..transport import Transport

# The markers of lease L are the names under L + WAITING_SUFFIX.
WAITING_SUFFIX = ".waiting/"
# What a host name may bring into a marker's name (one part of a transport name).
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_UNWRITTEN = object()


def waiting_prefix(lease: str) -> str:
    """The prefix under which the waiters of the remote lease named *lease* register."""
    return lease + WAITING_SUFFIX


class Marker:
    """This waiter's marker beside a remote lease, written for one lease id at a time."""

    def __init__(self, transport: Transport, lease: str) -> None:
        self._transport = transport
        host = _NAME_UNSAFE.sub("_", lockfile.HOST)[:64] or "host"
        # The random part: two threads of one process (or a fork) never share a marker.
        self.name = f"{waiting_prefix(lease)}{host}-{os.getpid()}-{os.urandom(6).hex()}"
        self._since = time.time()
        self._for: object = _UNWRITTEN

    def register(self, lease_id: str | None) -> None:
        """Write the marker, unless it was written for the lease *lease_id* already.

        Written again for a new lease id (a new holder): the previous holder
        deletes the markers it listed as it releases, and the new one must see
        this waiter all the same.

        Raises:
            Whatever the transport raises: a waiter that cannot register would
            wait for a result nobody publishes, so its caller computes instead.
        """
        if lease_id == self._for:
            return
        record = {
            "host": lockfile.HOST,
            "pid": os.getpid(),
            "since": self._since,
            "lease": lease_id,
        }
        self._transport.put_bytes(self.name, json.dumps(record, sort_keys=True).encode() + b"\n")
        self._for = lease_id

    def remove(self) -> None:
        """Delete the marker if it was written; never raises (the next holder deletes it)."""
        if self._for is _UNWRITTEN:
            return
        self._for = _UNWRITTEN
        # One left behind (a network blip) costs its lease's holder a needless publish.
        with contextlib.suppress(Exception):
            self._transport.delete(self.name)


def list_markers(transport: Transport, lease: str) -> list[str] | None:
    """The names of the markers beside *lease* (one LIST); None if the remote cannot say."""
    try:
        return list(transport.list(waiting_prefix(lease)))
    except Exception:
        return None


def delete_markers(transport: Transport, names: Iterable[str]) -> None:
    """Delete the markers *names*; never raises (one left is deleted by a later holder)."""
    for name in names:
        with contextlib.suppress(Exception):
            transport.delete(name)


__all__ = ["WAITING_SUFFIX", "Marker", "delete_markers", "list_markers", "waiting_prefix"]
