"""Leases in a remote: single-flight between machines that share only a remote.

Processes that share a store coordinate a miss through ``leases/`` in it
(``memostore/odb/leases.py``). Machines that each have their own store and share
only a remote with auto-fetch on (``s3://bucket/prefix``, or a directory) do
the same through that remote: after the local lease (which orders the
processes of one store), a miss also takes ``leases/<function>/<call key>``
in the first auto-fetch remote. Contract:

1. Creation is :meth:`~memostore.transport.Transport.add_if_new`: on S3 a
   ``PUT`` with ``If-None-Match: *``, which the service refuses once the name
   exists, so of several machines exactly one creates it. The creator then
   reads the lease back and holds it only if the record there is its own: a
   server that let two concurrent conditional writes through (``moto_server``
   checks the condition outside any lock) keeps one of them, and only that
   one's writer computes.
2. The record (JSON) names the holder: host, pid, process start time, lease
   id, start time, heartbeat (the holder's clock), heartbeat interval, expiry.
   A thread of the holder renews it every heartbeat interval by
   :meth:`~memostore.transport.Transport.set_if_equals` (``If-Match`` on its
   ETag); a renewal that finds another content has lost the lease (it was
   taken over) and stops.
3. A waiter judges the holder gone once its pid is dead or belongs to a later
   process (a holder the record places on this host), once the recorded
   heartbeat is older than the recorded expiry by the waiter's clock, or once
   the record has not changed for that long as this waiter watched it
   (monotonic time, from when it first saw these very bytes). The record is
   the remote's writer's, so nothing in it is trusted for time or liveness
   (``lease_records.py``): a heartbeat in the future counts as now, the
   recorded expiry may shorten the waiter's own (``odb.leases.EXPIRES_S``,
   30 s) but never lengthen it, and a record naming this host and a live pid
   (pid 1, say) is still judged by how long it stays unchanged. A record that
   does not change therefore holds a waiter at most 30 s; only one rewritten
   all along (a live holder's heartbeat) holds it longer, and
   ``@memo(wait=SECONDS)`` bounds that. A record is read only up to
   ``LEASE_MAX_BYTES``; a larger one, or one that is not a record, never
   crashes the waiter nor turns single-flight off for other calls.
4. A stale lease is taken over by ``set_if_equals(name, what was judged, new
   record)``: of several takers exactly one swaps; it reads back as in 1.
5. A waiter, before it polls, *registers*: it writes a marker
   ``leases/<function>/<call key>.waiting/<host>-<pid>-<random>`` (JSON: host,
   pid, since, the id of the lease it waits for), and writes it again whenever
   the lease it sees has another id (a new holder); it deletes its marker when
   it stops waiting, however it stops (``try``/``finally``).
6. The holder, done, lists the markers of its lease (one LIST). Only if there
   is one does it *publish* what its call stored: nothing else sends results
   to a remote (``memostore push`` is explicit), so without it the waiters on
   other machines would never see the result, and with no one waiting a miss
   uploads nothing. Only this call's ref and the objects it reaches are sent
   (:func:`~memostore.remote.sync.push_refs`, as ``memostore push REV`` would);
   a remote ref that already holds another value is kept. Nothing is
   published when the body raised or its result could not be stored; a LIST
   that fails counts as a waiter (a waiter must not be left to compute
   again). The heartbeat goes on while it uploads (an upload may outlast the
   expiry). A failed push is one warning, never a failure of the call. Then,
   if the lease's record is still its own, the holder deletes the markers it
   listed (also when it published nothing: those of killed waiters would
   stay otherwise), and last the lease.
7. A waiter reads the lease (one GET) every 100 ms, backing off to 250 ms.
   Once the lease is gone it looks the call up again (the local ref, then
   auto-fetch) and returns the fetched result as a hit; if there is none (the
   holder's body raised, or its push failed) it goes on as a miss and takes
   the lease itself.

The race of 6: a holder that listed no marker publishes nothing, then reads
its lease back and deletes it (two round trips). A waiter whose marker lands
in between (it began to wait at that very moment) is not seen: it finds the
lease gone and no result, and computes the call itself, as in 7. A second
computation, never a wrong result. (A waiter that registers while a holder
who saw another marker is uploading gets the result: the lease goes only
after the push.) Markers are deleted before the lease, so a live waiter's
marker disappears only while the holder it registered for releases; one that
goes on waiting for a new holder registers again (the lease's id changed)
after that.

A remote that cannot be reached is skipped as auto-fetch skips it (one
warning, shared with auto-fetch); one that refuses the lease (read-only
credentials, a server without conditional writes) is skipped for
``RETRY_AFTER_S`` after one warning. Either way the call computes as it would
without the remote.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError, warn
from ..odb import leases as local_leases
from ..odb import lockfile
from ..transport.config import RemoteConfig

# fetch's transports and down-marks are shared, so that a remote is opened,
# skipped and warned about once, whether a lookup or a lease found it down.
from . import reach
from .lease_records import (
    LEASE_MAX_BYTES,
    LeaseRecord,
    is_stale,
    parse_record,
    past,
)
from .lease_waiters import Marker, delete_markers, list_markers

if TYPE_CHECKING:
    from ..odb.store import Store
    from ..transport import Transport

# The transports are imported where used: this module is imported on a miss,
# and with no remote configured that must not pull them (or boto3) in.

LEASES_PREFIX = "leases/"
# A waiter's reads of a remote lease: first delay, growth, longest delay (each is
# a request to the remote, so slower than the local lease's 50-250 ms).
POLL_FIRST_S = 0.1
POLL_GROWTH = 1.5
POLL_MAX_S = 0.25
RETRY_AFTER_S = reach.RETRY_AFTER_S
# The longest a call waits on a lease in a remote the store does not trust, unless
# @memo(wait=SECONDS) says otherwise: whoever writes such a remote could rewrite a
# lease's heartbeat for ever, and a wait must not become a hang. A trusted remote's
# holders are waited for as long as they live.
UNTRUSTED_WAIT_S = 600.0
PUSH_JOBS = 8

_lock = threading.Lock()
_refused: dict[tuple[str, str | None], float] = {}
_format_checked: set[str] = set()
_config_paths: dict[Any, Any] = {}
# (pid, its start time), read from /proc once per process.
_process: list[Any] = [None, None]


def lease_name(ref: str) -> str:
    """The remote lease of the call whose ref is *ref* (``evals/<function>/<key>``)."""
    _, function, key = ref.split("/", 2)
    return f"{LEASES_PREFIX}{function}/{key}"


class RemoteLease:
    """A lease this process holds in a remote: renewed until released, released once."""

    def __init__(
        self,
        store: Store,
        remote: RemoteConfig,
        transport: Transport,
        ref: str,
        raw: bytes,
        record: dict[str, Any],
        before: str | None,
    ) -> None:
        self._store = store
        self._remote = remote
        self._transport = transport
        self._ref = ref
        self._name = lease_name(ref)
        self._raw = raw
        self._record = record
        self._before = before
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lost = False
        # A thread per lease, not per process: a miss through a remote already
        # costs network round trips, against which a thread start is nothing.
        threading.Thread(
            target=self._renew_loop, name="memostore-remote-lease", daemon=True
        ).start()

    @property
    def id(self) -> str:
        return str(self._record["id"])

    def _renew_loop(self) -> None:
        interval = float(self._record["heartbeat_s"])
        while not self._stop.wait(interval):
            with self._lock:
                if self._stop.is_set() or self.lost:
                    return
                record = {**self._record, "heartbeat": time.time()}
                raw = _encode(record)
                try:
                    swapped = self._transport.set_if_equals(self._name, self._raw, raw)
                except Exception:
                    continue  # a network blip: the next beat tries again, expiry allows several
                if not swapped:
                    self.lost = True  # taken over: someone judged this holder gone
                    return
                self._raw, self._record = raw, record

    def release(self, publish: bool) -> None:
        """Publish if *publish* and someone waits, stop renewing, delete markers and lease.

        Never raises (but an interrupt): a lease that cannot be deleted expires.
        """
        if self._pid != os.getpid():
            return  # a forked child's copy: the parent holds the lease
        try:
            # Renewed on while it publishes: an upload may outlast the expiry, and
            # waiters that judged the holder gone would compute the call again.
            waiting = list_markers(self._transport, self._name)
            if publish and waiting != []:
                self._publish()
        finally:
            self._stop.set()
            with self._lock:  # waits for a renewal in flight
                pass
        try:
            current = parse_record(_read(self._transport, self._name))
            # Only our own record: a lease that replaced ours is another holder's, and
            # so are the markers its waiters wrote (they register again for it).
            if current is None or current.id != self.id:
                return
            # The markers before the lease (the race note above): a waiter that goes on
            # waiting for a new holder registers with it only once this lease is gone.
            delete_markers(self._transport, waiting or ())
            self._transport.delete(self._name)
        except Exception:
            pass

    def _publish(self) -> None:
        from .sync import SyncReport, check_remote_format, push_refs, worker_pool

        try:
            evaluation_id = self._store.refs.read(self._ref)
        except MemostoreError:
            return
        if evaluation_id is None or evaluation_id == self._before:
            return  # nothing stored by this call (its result could not be stored)
        function = self._record.get("function", "?")
        try:
            transport = reach.transport_for(self._remote, "push")
            if transport.url not in _format_checked:
                check_remote_format(transport, create=True)
                _format_checked.add(transport.url)
            report = SyncReport("push", transport.url)
            with worker_pool(PUSH_JOBS) as pool:
                push_refs(self._store, transport, {self._ref: evaluation_id}, pool, report)
            if self._ref in report.skipped:
                raise MemostoreError(report.skipped[self._ref])
        except Exception as exc:
            warn(
                f"could not publish the result of {function} ({evaluation_id[:8]}) to remote "
                f"{reach.label(self._remote)}: {exc}; it is stored here "
                "(`memostore push` sends it), "
                "and processes on other machines waiting for it compute it themselves"
            )


def begin(
    store: Store,
    ref: str,
    symbol: str,
    key: str,
    deadline: float | None,
    restore: Callable[[], Any],
    say: Callable[..., None],
) -> Any:
    """Take, or wait for, the lease of *ref* in the store's first auto-fetch remote.

    Args:
        store: the local store (its own lease, if any, is already held).
        ref: the call's ref (``evals/<function>/<key>``).
        symbol: the memoised function, for messages.
        key: the call key.
        deadline: when to stop waiting (monotonic time), None for never.
        restore: looks the call up again (local ref, then auto-fetch): a hit, or
            a str saying why it misses.
        say: prints one single-flight line (``single_flight._say``).

    Returns:
        None: no remote lease (none configured, or it cannot be had): compute as
        before. A :class:`RemoteLease`: compute, then release it. Anything else
        is a hit another machine published.
    """
    try:
        # The lookup of this very miss has read the config already (auto-fetch, on a
        # local miss): its answer is reused, so that a store without remotes pays a
        # dict lookup here, not a second stat.
        remotes = _auto_fetch_remotes(store)
    except Exception:
        return None  # a damaged config: auto-fetch has said so, and computes
    if not remotes:
        return None
    remote = remotes[0]
    where = (remote.url, remote.endpoint)
    now = time.monotonic()
    if deadline is None and not remote.trusted:
        deadline = now + UNTRUSTED_WAIT_S
    for marks in (reach.down_since, _refused):
        since = marks.get(where)
        if since is not None and now - since < RETRY_AFTER_S:
            return None
    try:
        transport = reach.transport_for(remote)
        try:
            before = store.refs.read(ref)
        except MemostoreError:
            before = None
        lease = _create(store, remote, transport, ref, symbol, key, before)
        if lease is not None:
            return lease
        return _wait(store, remote, transport, ref, symbol, key, before, deadline, restore, say)
    except Exception as exc:
        from ..transport import RemoteObjectTooLarge, RemoteUnreachable

        if isinstance(exc, RemoteObjectTooLarge):
            # This call's lease only (planted or damaged): the call computes here, and
            # the remote's leases go on serving every other call.
            reach.warn_once(
                ("lease-size", where, ref),
                f"the single-flight lease of {symbol} in remote {reach.label(remote)} is no lease "
                f"record ({exc}); the call computes here without waiting",
            )
            return None
        if isinstance(exc, (RemoteUnreachable, TimeoutError)):
            reach.mark_down(where, remote, exc)
        else:
            with _lock:
                _refused[where] = time.monotonic()
            reach.warn_once(
                ("lease", where),
                f"remote {reach.label(remote)} refused a single-flight lease ({exc}); processes on "
                f"other machines sharing it may compute the same call at once (for the next "
                f"{RETRY_AFTER_S:.0f} s). The call computes here",
            )
        return None


def _auto_fetch_remotes(store: Store) -> list[RemoteConfig]:
    """auto-fetch's answer for this store, as its lookup left it (else asked afresh)."""
    path = _config_paths.get(store.root)
    if path is None:
        # Kept per root: a Path made afresh hashes its text again on every miss.
        path = _config_paths.setdefault(store.root, store.config_path)
    cached = reach.config_cache.get(path)  # type: ignore[arg-type]
    return cached[1] if cached is not None else reach.auto_fetch_remotes(store)


def _wait(
    store: Store,
    remote: RemoteConfig,
    transport: Transport,
    ref: str,
    symbol: str,
    key: str,
    before: str | None,
    deadline: float | None,
    restore: Callable[[], Any],
    say: Callable[..., None],
) -> Any:
    name = lease_name(ref)
    marker = Marker(transport, name)
    seen: tuple[bytes, float] | None = None
    said = False
    delay = POLL_FIRST_S
    started = time.monotonic()
    try:
        while True:
            raw = _read(transport, name)
            if raw is None:
                # Released: its result is published, or its body raised.
                found = restore()
                if not isinstance(found, str):
                    return found
                lease = _create(store, remote, transport, ref, symbol, key, before)
                if lease is not None:
                    return lease
            else:
                if seen is None or seen[0] != raw:
                    # Staleness counts from when this waiter first saw these bytes.
                    seen = (raw, time.monotonic())
                record = parse_record(raw)
                if is_stale(record, time.monotonic() - seen[1]):
                    lease = _take_over(store, remote, transport, ref, symbol, key, before, raw)
                    if lease is not None:
                        say(symbol, key, f"{_holder(record)} {_gone(record, remote)}", here=True)
                        # It may have published the result before it died.
                        return _restored_or(lease, restore)
                    continue
                # Before the first sleep: the sooner the holder can see us, the better.
                marker.register(record.id if record is not None else None)
                if record is not None and not said:
                    where = f"(through remote {remote.name or remote.url})"
                    what = f"waiting for {_holder(record)} {where}, computing"
                    say(symbol, key, what, since=past(record.started))
                    said = True
            if deadline is not None and time.monotonic() >= deadline:
                waited = time.monotonic() - started
                holder = _holder(parse_record(raw))
                why = (
                    ""
                    if remote.trusted
                    else (
                        f", the most a call waits on a remote this store does not trust "
                        f"(`memostore remote trust {remote.name or 'NAME'}` waits as long as "
                        "the holder lives)"
                    )
                )
                say(symbol, key, f"waited {waited:.0f} s for {holder}{why}", here=True)
                return None
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * POLL_GROWTH, POLL_MAX_S)
    finally:
        # However the wait ends (a hit, the lease taken, a timeout, an exception).
        marker.remove()


def _restored_or(lease: RemoteLease, restore: Callable[[], Any]) -> Any:
    """A hit, if the call can be fetched now (releasing *lease*), else *lease*."""
    try:
        found = restore()
    except BaseException:
        lease.release(publish=False)
        raise
    if isinstance(found, str):
        return lease
    lease.release(publish=False)
    return found


def _create(
    store: Store,
    remote: RemoteConfig,
    transport: Transport,
    ref: str,
    symbol: str,
    key: str,
    before: str | None,
) -> RemoteLease | None:
    record = _new_record(symbol, key)
    raw = _encode(record)
    if not transport.add_if_new(lease_name(ref), raw):
        return None
    return _if_ours(store, remote, transport, ref, raw, record, before)


def _take_over(
    store: Store,
    remote: RemoteConfig,
    transport: Transport,
    ref: str,
    symbol: str,
    key: str,
    before: str | None,
    judged: bytes,
) -> RemoteLease | None:
    record = _new_record(symbol, key)
    raw = _encode(record)
    if not transport.set_if_equals(lease_name(ref), judged, raw):
        return None
    return _if_ours(store, remote, transport, ref, raw, record, before)


def _if_ours(
    store: Store,
    remote: RemoteConfig,
    transport: Transport,
    ref: str,
    raw: bytes,
    record: dict[str, Any],
    before: str | None,
) -> RemoteLease | None:
    """The lease just written, if reading it back gives our record (see point 1)."""
    if _read(transport, lease_name(ref)) != raw:
        return None
    return RemoteLease(store, remote, transport, ref, raw, record, before)


def _new_record(function: str, key: str) -> dict[str, Any]:
    pid = os.getpid()
    if _process[0] != pid:  # once per process (and again in a forked child)
        _process[:] = [pid, lockfile.process_start_time(pid)]
    now = time.time()
    return {
        "host": lockfile.HOST,
        "pid": pid,
        "process_started": _process[1],
        "id": os.urandom(16).hex(),
        "function": function,
        "key": key,
        "started": now,
        "heartbeat": now,
        # Read at each lease: the local lease's settings are this process's too.
        "heartbeat_s": local_leases.HEARTBEAT_S,
        "expires_s": local_leases.EXPIRES_S,
    }


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True).encode() + b"\n"


def _read(transport: Transport, name: str) -> bytes | None:
    """The lease's bytes, None when absent (RemoteObjectTooLarge past LEASE_MAX_BYTES)."""
    from ..transport import NotFoundOnRemote

    try:
        return transport.get_bytes_at_most(name, LEASE_MAX_BYTES)
    except NotFoundOnRemote:
        return None


def _holder(record: LeaseRecord | None) -> str:
    if record is None or record.pid is None:
        return "an unknown holder (its lease has no readable record)"
    return f"pid {record.pid} on {record.host}"


def _gone(record: LeaseRecord | None, remote: RemoteConfig) -> str:
    if record is not None and record.host == lockfile.HOST:
        return "died while computing"
    heartbeat = past(record.heartbeat) if record is not None else None
    ago = f" ({time.time() - heartbeat:.0f} s ago)" if heartbeat is not None else ""
    return f"stopped its heartbeat in remote {remote.name or remote.url}{ago} while computing"


def reset_state() -> None:
    """Forget refused remotes (tests); ``reach.reset_state`` closes the transports."""
    with _lock:
        _refused.clear()
        _format_checked.clear()


__all__ = [
    "LEASES_PREFIX",
    "RemoteLease",
    "begin",
    "lease_name",
    "reset_state",
]
