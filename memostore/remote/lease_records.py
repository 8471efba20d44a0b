"""What a remote lease record says, checked: nothing in it is trusted for time or liveness.

A lease in a remote (``leases.py``) is a JSON record its holder rewrites every
heartbeat; whoever can write the remote can write any bytes there instead. A
waiter reads at most ``LEASE_MAX_BYTES`` of it and keeps only fields of the
right type and range (:func:`parse_record`); times are clamped to now, the
expiry to ``EXPIRES_RANGE`` and, for a waiter, to its own lease expiry, and
:func:`is_stale` measures staleness on the waiter's own clock from when it
first saw the record's bytes. Nothing here raises on any input.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any

from ..odb import leases as local_leases
from ..odb import lockfile

# A record's claimed expiry is clamped to this range (seconds); a waiter uses at most
# its own expiry besides (is_stale), remote gc this range.
EXPIRES_RANGE = (0.5, 300.0)
# The most bytes a lease record is read for (a record is ~300 bytes).
LEASE_MAX_BYTES = 64 << 10
# Unix times a record may state (up to the year 5138); others count as absent.
_TIME_RANGE = (0.0, 1e11)
# Pids a record may name on this host (Linux's pid_max is at most 2**22).
_PID_MAX = 1 << 22
_SAFE_TEXT = re.compile(r"[^A-Za-z0-9._:-]")


@dataclass(frozen=True)
class LeaseRecord:
    """A lease record as read from a remote, every field checked (None: absent or invalid).

    Attributes:
        host: the holder's host name (only ``[A-Za-z0-9._:-]``, at most 64 chars).
        pid: the holder's pid, if it is one this host could have.
        process_started: when the holder's process started (Unix time).
        id: the lease's id (at most 64 chars).
        started: when the holder took the lease (Unix time, the holder's clock).
        heartbeat: the holder's last renewal (Unix time, the holder's clock).
        expires_s: the claimed expiry, clamped to ``EXPIRES_RANGE``.
    """

    host: str | None
    pid: int | None
    process_started: float | None
    id: str | None
    started: float | None
    heartbeat: float | None
    expires_s: float


def parse_record(raw: bytes | None) -> LeaseRecord | None:
    """The record *raw* holds, or None when it holds none (never raises)."""
    if raw is None:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    pid = body.get("pid")
    return LeaseRecord(
        host=_text(body.get("host")),
        pid=pid if type(pid) is int and 0 < pid < _PID_MAX else None,
        process_started=_time(body.get("process_started")),
        id=_text(body.get("id")),
        started=_time(body.get("started")),
        heartbeat=_time(body.get("heartbeat")),
        expires_s=_expiry(body.get("expires_s")),
    )


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return _SAFE_TEXT.sub("_", value[:64])


def _time(value: Any) -> float | None:
    if type(value) not in (int, float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    if not math.isfinite(value) or not _TIME_RANGE[0] <= value <= _TIME_RANGE[1]:
        return None
    return value


def _expiry(value: Any) -> float:
    if type(value) not in (int, float):
        return local_leases.EXPIRES_S
    try:
        value = float(value)
    except OverflowError:
        return EXPIRES_RANGE[1]
    if value != value:
        return local_leases.EXPIRES_S
    # Clamped: a damaged record must not make every lease stale at once, nor none ever.
    return min(max(value, EXPIRES_RANGE[0]), EXPIRES_RANGE[1])


def past(when: float | None) -> float | None:
    """A time the record claims, clamped to now: nothing a remote says is in the future."""
    return None if when is None else min(when, time.time())


def is_stale(record: LeaseRecord | None, unchanged_for: float) -> bool:
    """Whether the holder of a lease whose content is *record* is gone (point 3).

    *unchanged_for*: how long (this waiter's monotonic clock) the record's bytes
    have been the same since this waiter first saw them.
    """
    # A live pid here is no proof: the record is the remote writer's (pid 1 is always
    # alive). A live holder renews its record; one that does not is judged below.
    here = record is not None and record.host == lockfile.HOST and record.pid is not None
    if here and _dead_here(record):  # type: ignore[arg-type]
        return True
    # The record may shorten the wait (its holder's own expiry), never lengthen it past
    # this process's: a record unchanged for that long is stale whatever it claims.
    own = local_leases.EXPIRES_S
    expires = min(record.expires_s, own) if record is not None else own
    heartbeat = past(record.heartbeat) if record is not None else None
    late = heartbeat is not None and time.time() - heartbeat > expires
    return late or unchanged_for > expires


def _dead_here(record: LeaseRecord) -> bool:
    """True if the holder, a process of this host, is known to be gone."""
    pid = record.pid
    if pid is None or not lockfile.pid_alive(pid):
        return True
    recorded = record.process_started
    now_started = lockfile.process_start_time(pid)
    # /proc dates processes to the clock tick, from a boot time rounded to the second.
    return recorded is not None and now_started is not None and abs(now_started - recorded) > 1.0


__all__ = ["EXPIRES_RANGE", "LEASE_MAX_BYTES", "LeaseRecord", "is_stale", "parse_record", "past"]
