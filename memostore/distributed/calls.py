"""One memoised call made by every rank of a torch.distributed job, in the three modes.

``distributed="all"`` (the default) and ``"leader"``: the ranks make the call
together, with one decision for all of them.

1. Rank 0 looks the call up (and plans its hit), then one all-gather gives
   every rank each rank's call key and rank 0's answer: the ranks compare the
   keys (a mismatch raises :class:`RanksDisagree` on every rank) and learn the
   evaluation rank 0 would restore.
2. On a hit, every other rank plans the hit of that very evaluation from its
   own store, and a second all-gather says whether every rank can: a rank
   whose store lacks it gets it from rank 0 (``transfer.py``) and tries once
   more; a rank that cannot use it (its global RNGs are in another state, an
   effect cannot be replayed on its arguments) makes the call a miss on all.
   Each rank then commits its own hit (the caller does, as for any hit).
3. On a miss, ``"all"``: every rank runs the body (it may hold collectives:
   DDP training); the ranks then exchange whether their body returned or
   raised, before anything is stored, and a failure on any rank raises on
   every rank (:class:`RankFailed` on the others); the ranks then compare
   their results (``agreement.py``): equal, rank 0 stores it once; different,
   each rank stores its own and the evaluation holds them per rank. Rank 0
   sends the evaluation to the other stores when they are node-local.
   ``"leader"``: rank 0 alone runs the body while the others wait (rank 0
   tells them every few seconds that it still runs, so no collective times
   out); they then restore what it stored as a hit, or raise
   :class:`RankFailed` naming its exception.

``distributed="per_rank"``: each rank's call is keyed with its rank and the
world size, and looked up and stored by that rank alone (no collective).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import TYPE_CHECKING, Any

from ..call import hits, single_flight, verbose
from ..call.ranks import Computed
from ..errors import MemostoreError, ObjectNotFound
from ..records import group as groups
from ..records.evaluation import eval_ref_name
from ..values.rank_results import as_rank
from . import transfer
from .agreement import Agreement
from .topology import Topology, known, topology

if TYPE_CHECKING:
    from ..call.keys import KeyedCall
    from ..call.memoize import MemoSeam
    from ..odb.store import Store

# How often rank 0 tells waiting ranks that a leader body still runs: well
# under any collective timeout a job would set (torch's default is 10-30 min).
HEARTBEAT_S = 5.0

_OK, _LACKS, _UNUSABLE = 0, 1, 2


class RanksDisagree(MemostoreError):
    """The ranks of a job made different calls where they must make the same one."""


class RankFailed(MemostoreError):
    """The body raised on another rank of the job.

    Attributes:
        failures: (rank, exception type name, message) of each rank that failed.
    """

    def __init__(self, message: str, failures: list[tuple[int, str, str]]) -> None:
        super().__init__(message)
        self.failures = failures


def run_call(
    fn: MemoSeam, store: Store, call: KeyedCall, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> hits.Hit | Computed | None:
    """Make the call as a rank of a job: a hit to commit, the computed result, or None.

    None: not a rank of a job of two or more ranks (or ``per_rank`` mode, or a
    call nested in a leader body): the caller goes on as without a job. Called
    through :func:`memostore.call.ranks.run_in_group`, with the function's seam.
    """
    mode = fn.mode
    if mode == "per_rank":
        return None
    group = groups.current()
    if group is None:
        return None
    with as_rank(group.rank, group.world):  # a result stored per rank: this rank's
        hit, flight = _decide(fn, store, call, group, mode == "leader")
    if isinstance(hit, hits.Hit):
        return hit
    topo = topology(group, store)
    if verbose.enabled():
        verbose.report_miss(fn.symbol, call.key, hit or "no stored call on rank 0")
    # Rank 0's lease (if it took one) goes once the evaluation is recorded.
    with flight or contextlib.nullcontext():
        if mode == "leader":
            return _leader_miss(fn, store, call, args, kwargs, group, topo)
        return _all_miss(fn, store, call, args, kwargs, group, topo)


# -- the decision -------------------------------------------------------------------------------
def _decide(
    fn: MemoSeam, store: Store, call: KeyedCall, group: groups.Group, leader: bool
) -> tuple[Any, Any]:
    """Rank 0's planned hit agreed by every rank, or why the call misses; and rank 0's flight.

    The first is a Hit or a str; the flight (rank 0, on a miss) holds the
    single-flight lease taken for the whole job, released once the call is recorded.
    """
    planned: Any = ""
    answer = bytes(33)
    seen: list[str | None] = []  # what rank 0's look-up found under the ref
    if group.rank == 0:
        try:
            planned = fn.restore(store, eval_ref_name(fn.symbol, call.key), call, seen)
        except Exception as exc:  # raised on rank 0 alone, the others would wait: a miss
            planned = f"the lookup failed ({type(exc).__name__}: {exc})"
        if isinstance(planned, hits.Hit):
            answer = b"\1" + bytes.fromhex(planned.evaluation_id)
    ready = b"\1" if known(group, store) else b"\0"
    rows = group.all_gather_fixed(bytes.fromhex(call.key) + answer + ready)
    _check_keys(fn, rows)
    if not all(row[65] for row in rows):
        # A rank meets this store for the first time: all probe again, together.
        topology(group, store, refresh=True)
    if rows[0][32]:
        evaluation_id = rows[0][33:65].hex()
    else:
        reason = planned if group.rank == 0 else "no stored call on rank 0"
        if fn.wait is False:
            return reason, None
        flight, found = _single_flight(fn, store, call, group, seen)
        if found is None:
            return reason, flight
        evaluation_id = found  # another job (or process) stored it meanwhile
        if group.rank == 0:
            planned = flight.hit
    # In leader mode only rank 0's RNGs follow the body, on a miss as on a hit.
    track_rng = fn.track_rng and not (leader and group.rank)
    if group.rank == 0:
        status, hit = _OK, planned
    else:
        status, hit = _plan(fn, store, call, evaluation_id, track_rng)
    statuses = [row[0] for row in group.all_gather_fixed(bytes([status]))]
    if _LACKS in statuses and _UNUSABLE not in statuses:
        topo = topology(group, store)
        lacking = {topo.writer(r) for r, s in enumerate(statuses) if s == _LACKS}
        transfer.share(group, topo, store, call, evaluation_id, sorted(lacking - {topo.writer(0)}))
        if status == _LACKS:
            status, hit = _plan(fn, store, call, evaluation_id, track_rng)
        statuses = [row[0] for row in group.all_gather_fixed(bytes([status]))]
    if all(s == _OK for s in statuses):
        return hit, None
    where = [r for r, s in enumerate(statuses) if s != _OK]
    return f"rank {where[0]} cannot use the stored call rank 0 found", None


def _single_flight(
    fn: MemoSeam, store: Store, call: KeyedCall, group: groups.Group, seen: list[str | None]
) -> tuple[Any, str | None]:
    """Rank 0 waits for (or takes) the call's lease for the whole job; the others wait on it.

    Returns rank 0's flight (None elsewhere) and the evaluation another caller
    stored while rank 0 waited, if any (on every rank).
    """
    if group.rank != 0:
        return None, _wait_for_leader(group)[1]
    ref = eval_ref_name(fn.symbol, call.key)
    flight = None
    with _Heartbeat(group) as beat:
        try:
            with groups.alone():  # single-flight as for a process of its own
                flight = single_flight.begin(
                    store,
                    ref,
                    fn.symbol,
                    call.key,
                    fn.wait,
                    lambda: fn.restore(store, ref, call),
                    # Not what rank 0's look-up already found (and warned about) again.
                    recheck=lambda: fn.restore_if_moved(store, ref, call, seen),
                )
        finally:
            hit = flight.hit if flight is not None else None
            beat.finish(("done", None if hit is None else hit.evaluation_id))
    return flight, None if flight.hit is None else flight.hit.evaluation_id


def _check_keys(fn: MemoSeam, rows: list[bytes]) -> None:
    keys = [row[:32].hex() for row in rows]
    if all(k == keys[0] for k in keys):
        return
    shown = ", ".join(f"rank {r}: {k[:8]}" for r, k in enumerate(keys))
    raise RanksDisagree(
        f"the ranks called {fn.symbol} with different arguments, or its code read globals "
        f"that differ by rank (call keys {shown}); with "
        "@memo's default distributed='all' (and 'leader') every rank must make the same call. "
        "For state that differs by rank (a shard, a rank's own RNG), use "
        '@memo(distributed="per_rank")'
    )


def _plan(
    fn: MemoSeam, store: Store, call: KeyedCall, evaluation_id: str, track_rng: bool
) -> tuple[int, Any]:
    """This rank's planned hit of *evaluation_id*: (status, hit or None)."""
    try:
        hit = fn.plan_hit(store, evaluation_id, call, track_rng)
    except ObjectNotFound:
        return _LACKS, None
    except Exception:  # any reason rank 0's hit is not this rank's: every rank computes
        return _UNUSABLE, None
    return (_OK, hit) if hit is not None else (_UNUSABLE, None)


# -- misses ----------------------------------------------------------------------------------
def _all_miss(
    fn: MemoSeam,
    store: Store,
    call: KeyedCall,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    group: groups.Group,
    topo: Topology,
) -> Computed:
    agreement = Agreement(fn.symbol, eval_ref_name(fn.symbol, call.key), store, group, topo)
    body = _exchanging(fn, group, agreement)
    if group.rank == 0:
        try:
            result = fn.compute(store, call, args, kwargs, body=body, writer=agreement)
        finally:
            agreement.finish()  # the other ranks wait for rank 0's word on the result
    else:
        result = body(*args, **kwargs)
        agreement.settle(result)
    if not topo.shared:
        stored = call.stored.id if group.rank == 0 and call.stored is not None else None
        transfer.share(group, topo, store, call, stored, topo.writers())
    return Computed(result)


def _exchanging(fn: MemoSeam, group: groups.Group, agreement: Agreement) -> Any:
    """The body, followed by every rank learning whether every rank's body returned."""

    def body(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn.run_body(*args, **kwargs)
        except BaseException as exc:
            # A broken group: this rank's own exception says the most.
            with contextlib.suppress(Exception):
                group.all_gather_object((type(exc).__qualname__, _message(exc)))
            exc.add_note(
                f"memostore: raised on rank {group.rank} of {group.world} in {fn.symbol}; "
                "the other ranks raise RankFailed naming it"
            )
            raise
        outcomes = group.all_gather_object(None)
        failures = [(r, o[0], o[1]) for r, o in enumerate(outcomes) if o is not None]
        if failures:
            raise RankFailed(_failed_text(fn, group, failures), failures)
        agreement.arm()
        return result

    return body


def _message(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 2000 else text[:2000] + "..."


def _failed_text(fn: MemoSeam, group: groups.Group, failures: list[tuple[int, str, str]]) -> str:
    said = "; ".join(f"rank {r} raised {name}: {msg}" for r, name, msg in failures)
    who = ", ".join(str(r) for r, _, _ in failures)
    return (
        f"{fn.symbol} failed on rank{'s' if len(failures) > 1 else ''} {who} of the job's "
        f"{group.world} ({said}); no result is stored and every rank raises"
    )


def _leader_miss(
    fn: MemoSeam,
    store: Store,
    call: KeyedCall,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    group: groups.Group,
    topo: Topology,
) -> hits.Hit | Computed:
    if group.rank == 0:
        with _Heartbeat(group) as beat:
            try:
                with groups.alone():
                    result = fn.compute(store, call, args, kwargs)
            except BaseException as exc:
                beat.finish(("failed", type(exc).__qualname__, _message(exc)))
                exc.add_note(
                    f"memostore: raised on rank 0 (the leader) in {fn.symbol}; the other ranks "
                    "raise RankFailed naming it"
                )
                raise
            stored = call.stored.id if call.stored is not None else None
            beat.finish(("ok", stored))
        if not topo.shared:
            transfer.share(group, topo, store, call, stored, topo.writers())
        return Computed(result)
    outcome = _wait_for_leader(group)
    if outcome[0] == "failed":
        failures = [(0, outcome[1], outcome[2])]
        raise RankFailed(_failed_text(fn, group, failures), failures)
    stored = outcome[1]
    if not topo.shared:
        transfer.share(group, topo, store, call, None, topo.writers())
    if stored is not None:
        with as_rank(group.rank, group.world):
            status, hit = _plan(fn, store, call, stored, track_rng=False)
        if status == _OK:
            return hit
    verbose.report_single_flight(
        fn.symbol,
        f"rank {group.rank} cannot restore what rank 0 computed for {call.key[:8]}; "
        "computing it here, unstored",
    )
    return Computed(fn.run_body(*args, **kwargs))


def _wait_for_leader(group: groups.Group) -> tuple[Any, ...]:
    while True:
        message = group.broadcast_object(None)
        if message[0] != "running":
            return tuple(message)


class _Heartbeat:
    """Rank 0's thread that broadcasts "running" every few seconds, then the outcome.

    Only this thread makes collectives while the leader body runs (the body
    must make none: the other ranks are not in it).
    """

    def __init__(self, group: groups.Group) -> None:
        self._group = group
        self._final: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._run, name="memostore-leader", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def finish(self, outcome: tuple[Any, ...]) -> None:
        self._final.put(outcome)

    def __exit__(self, *exc: object) -> None:
        if self._final.empty() and self._thread.is_alive():
            self._final.put(("failed", "BaseException", "the leader stopped"))
        self._thread.join()

    def _run(self) -> None:
        while True:
            try:
                outcome = self._final.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                outcome = None
            try:
                self._group.broadcast_object(("running",) if outcome is None else outcome)
            except Exception:
                return  # the job is gone: the main thread's own calls will say so
            if outcome is not None:
                return
