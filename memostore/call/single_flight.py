"""Single-flight: a miss on a call that another live caller is computing waits for it.

After a miss's lookup (never on a hit), :func:`begin` decides what the miss
does about other callers of the same call key:

- no one else computes it: this caller takes the lease (``leases.py``) and
  computes, releasing the lease once its evaluation is recorded;
- another thread of this process computes it: wait on that thread's event;
- another process computes it (on this host or another one sharing the
  store): print one line saying who and since when, poll the lease (50 ms,
  backing off to 250 ms) and, once it is gone, restore the result as a hit;
- the holder died (or its lease expired): one waiter takes the lease over and
  computes; the others wait on it;
- the holder's body raised (its lease is removed, no result is stored):
  each waiter goes on as a miss, and one of them takes the lease;
- the same thread asks again inside the body (a re-entrant call): compute, never
  wait on oneself;
- a rank of an initialised ``torch.distributed`` process group: compute (a body
  with collectives needs every rank in it); ``distributed/calls.py`` calls
  :func:`begin` on rank 0 for the whole job instead, the other ranks waiting with it;
- the store has an auto-fetch remote: the lease is also taken there, for
  machines that share only that remote (``remote/leases.py``); the holder
  publishes its stored result there before releasing it if a process on
  another machine registered as waiting for it, and uploads nothing otherwise.

``wait`` bounds all this: True waits as long as the holder lives, a number of
seconds at most that long, then computes. Anything that goes wrong with a lease
file (a read-only store, a full disk) makes the call compute as it would
without single-flight.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb import leases
from ..records.group import acting_alone
from . import verbose

if TYPE_CHECKING:
    from ..odb.store import Store

# Polling the lease of another process: first delay, growth, longest delay.
POLL_FIRST_S = 0.05
POLL_GROWTH = 1.5
POLL_MAX_S = 0.25


@dataclass
class _Local:
    """The thread of this process that computes (or waits for) one call."""

    owner: int
    done: threading.Event = field(default_factory=threading.Event)


_local: dict[tuple[str, str], _Local] = {}
_local_lock = threading.Lock()


def _after_fork() -> None:
    global _local_lock
    _local.clear()  # the child runs none of its parent's threads
    _local_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class Flight:
    """What a miss got from :func:`begin`: a hit restored after waiting, or a go.

    Attributes:
        hit: the restored hit (another caller stored the result), else None:
            compute, then leave the ``with`` block (releasing the lease, if held).
    """

    def __init__(
        self,
        hit: Any = None,
        lease: leases.Lease | None = None,
        local: tuple[tuple[str, str], _Local] | None = None,
    ) -> None:
        self.hit = hit
        self._lease = lease
        self._local = local
        self._remote: Any = None  # a lease in a remote (remote/leases.py)

    def release(self, stored: bool = False) -> None:
        """Drop the leases and wake this process's waiting threads (idempotent).

        Args:
            stored: the body returned; a lease held in a remote first publishes
                the evaluation the call stored (if any) there, if someone waits.
        """
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
        local, self._local = self._local, None
        if local is not None:
            key, entry = local
            with _local_lock:
                if _local.get(key) is entry:
                    del _local[key]
            entry.done.set()
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.release(publish=stored)

    def __enter__(self) -> Flight:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.release(stored=exc_type is None)


def check_wait(wait: Any) -> bool | float:
    """The ``@memo(wait=...)`` value, checked: True, False or seconds (a float >= 0)."""
    if wait is True or wait is False:
        return wait
    if isinstance(wait, (int, float)) and wait == wait and wait >= 0:
        return float(wait)
    raise MemostoreError(
        f"@memo(wait={wait!r}) is not a wait: use wait=True (the default: a miss on a call "
        "another live process computes waits for its result), wait=False (compute at once) "
        "or a number of seconds (the longest wait, then compute)"
    )


def begin(
    store: Store,
    ref: str,
    symbol: str,
    key: str,
    wait: bool | float,
    restore: Callable[[], Any],
    recheck: Callable[[], Any] | None = None,
) -> Flight:
    """Wait for, or take on, the computation of the call named *ref*.

    Args:
        store: the store.
        ref: the call's ref (``evals/<function>/<key>``).
        symbol: the memoised function, for messages.
        key: the call key.
        wait: True, or the longest wait in seconds.
        restore: looks the call up again: a hit, or a str (why it misses).
        recheck: the look-up made once the lease is taken (default: *restore*);
            it may skip what the caller's own look-up already found.

    Returns:
        A :class:`Flight`; with its hit None, the caller computes inside it.
    """
    if _in_distributed_job():
        return Flight()
    deadline = None if wait is True else time.monotonic() + float(wait)
    me = threading.get_ident()
    name = (str(store.root) if store.root is not None else f"memory:{id(store)}", ref)
    said = False
    while True:
        with _local_lock:
            entry = _local.get(name)
            if entry is None:
                entry = _local[name] = _Local(me)
            elif entry.owner == me:
                return Flight()  # re-entrant: the outer frame of this thread computes it
        if entry.owner != me:
            if not said:
                _say(symbol, key, "waiting for another thread of this process, computing")
                said = True
            if not _wait_event(entry.done, deadline):
                _say(symbol, key, f"waited {wait:.0f} s for another thread", here=True)
                return Flight()
            found = restore()
            if not isinstance(found, str):
                return Flight(found)
            continue
        flight = Flight(local=(name, entry))
        try:
            if store.root is None:
                return flight  # threads only: an in-memory store has no other process
            found = _across_processes(store, ref, symbol, key, deadline, restore, recheck)
            if isinstance(found, leases.Lease) or found is None:
                flight._lease = found
                # Machines sharing only an auto-fetch remote (nothing without one).
                from ..remote import leases as remote_leases

                found = remote_leases.begin(store, ref, symbol, key, deadline, restore, _say)
                if isinstance(found, remote_leases.RemoteLease) or found is None:
                    flight._remote = found
                    return flight
        except BaseException:
            flight.release()
            raise
        flight.release()
        return Flight(found)


def _in_distributed_job() -> bool:
    """Whether this process is a rank of an initialised torch.distributed process group."""
    if acting_alone():
        return False  # rank 0 waiting (or leasing) for its whole job: distributed/calls.py
    torch = sys.modules.get("torch")  # never imported here: a job that uses it has
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # a partly initialised or unusual build: not a job we know of
        return False


def _wait_event(event: threading.Event, deadline: float | None) -> bool:
    """Wait until *event* is set (True) or the deadline passes (False)."""
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return event.is_set()
        # In slices: a KeyboardInterrupt reaches a waiting main thread at once.
        if event.wait(1.0 if remaining is None else min(remaining, 1.0)):
            return True


def _across_processes(
    store: Store,
    ref: str,
    symbol: str,
    key: str,
    deadline: float | None,
    restore: Callable[[], Any],
    recheck: Callable[[], Any] | None = None,
) -> Any:
    """The lease taken (compute), a hit another process stored, or None (compute unleased)."""
    root = str(store.root)
    try:
        path = leases.lease_path(root, ref)
        lease = leases.try_create(root, path, symbol, key)
    except (OSError, MemostoreError, ValueError):
        return None  # no lease can be had here (read-only store, ...): compute as before
    if lease is not None:
        # Looked up again under the lease: a holder that published and left between
        # our lookup and this create would otherwise be computed once more (a ref
        # read, ~10 us, against the milliseconds a miss takes to store).
        return _restored_or(lease, recheck or restore)
    try:
        return _wait_for_holder(path, root, symbol, key, deadline, restore)
    except (OSError, MemostoreError):
        return None


def _restored_or(lease: leases.Lease, restore: Callable[[], Any]) -> Any:
    """A hit, if the call is stored now (releasing *lease*), else *lease*."""
    try:
        found = restore()
    except BaseException:
        lease.release()
        raise
    if isinstance(found, str):
        return lease
    lease.release()
    return found


def _wait_for_holder(
    path: str,
    root: str,
    symbol: str,
    key: str,
    deadline: float | None,
    restore: Callable[[], Any],
) -> Any:
    watch = leases.Watch()
    said = False
    delay = POLL_FIRST_S
    started = time.monotonic()
    while True:
        view = leases.read_lease(path)
        if view is None:
            # Released: its result is stored, or its body raised.
            found = restore()
            if not isinstance(found, str):
                return found
            lease = leases.try_create(root, path, symbol, key)
            if lease is not None:
                return lease
            continue
        if watch.is_stale(view):
            lease = leases.take_over(path, view, symbol, key)
            if lease is not None:
                _say(symbol, key, f"{view.holder_text()} {_gone(view)} while computing", here=True)
                # It may have died after storing the result, before removing its lease.
                return _restored_or(lease, restore)
            continue
        if view.record is None:
            pass  # created a moment ago, its record not written yet: look again
        elif not said:
            _say(symbol, key, f"waiting for {view.holder_text()}, computing", since=view.started)
            said = True
        if deadline is not None and time.monotonic() >= deadline:
            waited = time.monotonic() - started
            _say(symbol, key, f"waited {waited:.0f} s for {view.holder_text()}", here=True)
            return None
        pause = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
        time.sleep(pause)
        delay = min(delay * POLL_GROWTH, POLL_MAX_S)


def _gone(view: leases.LeaseView) -> str:
    if view.host is not None and view.host == leases.lockfile.HOST:
        return "died"
    return f"stopped its heartbeat ({time.time() - view.heartbeat:.0f} s ago)"


def _say(symbol: str, key: str, what: str, since: float | None = None, here: bool = False) -> None:
    text = f"{what} {key[:8]}"
    if since is not None:
        clock = time.strftime("%H:%M:%S", time.localtime(since))
        text += f" since {clock} ({max(time.time() - since, 0):.0f} s)"
    if here:
        text += "; computing it here"
    else:
        text += "; @memo(wait=False) would compute at once"
    verbose.report_single_flight(symbol, text)
