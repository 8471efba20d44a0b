"""gc of a remote's single-flight leases and of the markers of their waiters.

Machines that share only a remote keep their leases in it (``remote/leases.py``):
``leases/<function>/<call key>``, a record the holder rewrites every heartbeat,
and beside it the waiters' markers ``<lease>.waiting/<host>-<pid>-<random>``
(``remote/lease_waiters.py``), each written once by a live waiter and never
refreshed. What gc of a remote makes of them:

- **A lease** is exactly a name ``leases/<function>/<call key>``; a marker is
  never one. A lease is *stale* once its holder has been silent for longer
  than both its expiry (the record's ``expires_s``) and the grace period: its
  recorded ``heartbeat`` is older than that, and so is the remote's
  modification time, where the remote gives one (the holder rewrites the
  lease every heartbeat, so a recent write means a live holder whatever its
  clock says). A lease whose record is not valid JSON is judged by its
  modification time alone; one that nothing dates, or that the remote refuses
  to read, is live. A live lease is a call being computed right now: its
  evaluation is kept.
- **A marker** is deleted only when its lease is absent (or stale, and deleted
  with it) and the remote dated the marker longer ago than the grace period.
  A marker under a live lease stays however old: its waiter may be waiting
  still, and without it the holder would not publish its result.

Deletion re-reads first, since the transport has no compare-and-delete: a
stale lease is deleted (its old markers first, as a holder releases) only if
its content is still what was judged, so a lease a waiter just took over is
kept; the markers of an absent lease only while the lease is still absent.
The window left between that read and the delete costs, at worst, a second
computation of the call, never a wrong result.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field

from ..odb.leases import EXPIRES_S
from ..remote.lease_records import LEASE_MAX_BYTES, parse_record
from ..remote.lease_waiters import WAITING_SUFFIX
from ..remote.leases import LEASES_PREFIX
from ..transport import DirectoryTransport, NotFoundOnRemote, RemoteError, Transport

_WAITING = WAITING_SUFFIX.rstrip("/")  # the marker directory's suffix: "<key>.waiting"


@dataclass
class LeaseSurvey:
    """What one listing of a remote's ``leases/`` found, judged at one instant.

    Attributes:
        live: calls (``<function>/<call key>``) whose lease may still be held.
        stale: stale lease name -> the content judged stale.
        orphans: lease name -> its markers to delete (the lease absent or stale).
    """

    live: set[str] = field(default_factory=set)
    stale: dict[str, bytes] = field(default_factory=dict)
    orphans: dict[str, list[str]] = field(default_factory=dict)


def survey_leases(transport: Transport, pool: Executor, grace_s: float, now: float) -> LeaseSurvey:
    """Sort the remote's leases into live and stale, and find the markers to delete.

    Args:
        transport: the remote.
        pool: runs the reads of the leases in parallel.
        grace_s: the gc grace period (a lease's silence and a marker's age must pass it).
        now: the instant judged (Unix time).

    Returns:
        The survey; an empty one where the remote cannot list ``leases/``.
    """
    found = LeaseSurvey()
    leases: dict[str, float | None] = {}
    markers: dict[str, list[tuple[str, float | None]]] = {}
    try:
        entries = list(transport.scan(LEASES_PREFIX))
    except RemoteError:
        return found
    for entry in entries:
        parts = entry.name[len(LEASES_PREFIX) :].split("/")
        if len(parts) == 2:
            leases[entry.name] = entry.modified
        elif len(parts) == 3 and parts[1].endswith(_WAITING) and parts[1] != _WAITING:
            lease = f"{LEASES_PREFIX}{parts[0]}/{parts[1][: -len(_WAITING)]}"
            markers.setdefault(lease, []).append((entry.name, entry.modified))
        # Anything else under leases/ is no name memostore writes: left alone.
    names = sorted(leases)
    for name, raw in zip(names, pool.map(lambda n: _read(transport, n), names), strict=True):
        if raw is None:
            del leases[name]  # released since it was listed: absent
        elif isinstance(raw, bytes) and _is_stale(raw, leases[name], grace_s, now):
            found.stale[name] = raw
        else:
            # Live, or the remote refused to say (a GET that failed): kept as live.
            found.live.add(name[len(LEASES_PREFIX) :])
    for lease, entries_of in markers.items():
        if lease in leases and lease not in found.stale:
            continue  # beside a live lease, however old: its waiter may still wait
        old = [n for n, modified in entries_of if _older(modified, grace_s, now)]
        if old:
            found.orphans[lease] = old
    return found


def remove_leases(transport: Transport, survey: LeaseSurvey) -> tuple[int, int]:
    """Delete the stale leases and orphan markers of *survey*, checking each again first.

    Returns:
        (leases deleted, markers deleted).
    """
    leases = markers = 0
    for lease in sorted(set(survey.orphans) | set(survey.stale)):
        judged = survey.stale.get(lease)
        if judged is not None and not _unchanged(transport, lease, judged):
            continue  # taken over (or released) since it was judged: its markers too
        if judged is None and transport.stat(lease) is not None:
            continue  # a new holder since the listing: its waiters may write these names
        for name in survey.orphans.get(lease, ()):
            transport.delete(name)
            markers += 1
        # The markers before the lease, as a holder releases; read again just before.
        if judged is not None and _unchanged(transport, lease, judged):
            transport.delete(lease)
            leases += 1
    return leases, markers


def prune_lease_dirs(transport: Transport) -> int:
    """Remove the empty directories a directory remote keeps under ``leases/``.

    Deleting a lease or a marker leaves its directory behind (``leases/<function>/``,
    ``<call key>.waiting/``); other remotes have no directories. Only empty ones
    go, and a writer that walked into one just before keeps working (the
    transport walks again and makes it anew).

    Returns:
        How many directories were removed.
    """
    if not isinstance(transport, DirectoryTransport):
        return 0
    return transport.remove_empty_dirs(LEASES_PREFIX)


def counted(survey: LeaseSurvey) -> tuple[int, int]:
    """(leases, markers) that :func:`remove_leases` would delete (a dry run's count)."""
    return len(survey.stale), sum(len(names) for names in survey.orphans.values())


def _read(transport: Transport, name: str) -> bytes | str | None:
    """The lease's content; None if absent; "unreadable" if the remote refused to say."""
    try:
        return transport.get_bytes_at_most(name, LEASE_MAX_BYTES)
    except NotFoundOnRemote:
        return None
    except RemoteError:  # RemoteObjectTooLarge among them: judged by its age alone
        return "unreadable"


def _is_stale(raw: bytes, modified: float | None, grace_s: float, now: float) -> bool:
    """Whether the holder of a lease whose content is *raw* has been silent too long."""
    record = parse_record(raw)  # None where the record is not readable JSON
    expires = record.expires_s if record is not None else EXPIRES_S
    silent_for = max(expires, grace_s)
    # A heartbeat in the future counts as now: the record is the remote writer's.
    heartbeat = min(record.heartbeat, now) if record and record.heartbeat is not None else None
    dates = [when for when in (heartbeat, modified) if when is not None]
    # Nothing dates it: kept, as a lease that may be held.
    return bool(dates) and all(now - when > silent_for for when in dates)


def _older(modified: float | None, grace_s: float, now: float) -> bool:
    if modified is None:
        return grace_s <= 0  # undated: kept, as undated objects are (unless --grace 0)
    return now - modified > grace_s


def _unchanged(transport: Transport, lease: str, judged: bytes) -> bool:
    return _read(transport, lease) == judged


__all__ = ["LeaseSurvey", "counted", "prune_lease_dirs", "remove_leases", "survey_leases"]
