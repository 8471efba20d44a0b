"""``push`` and ``pull``: send a store's evaluations to a remote and back.

Both follow the same steps:

1. compare refs: read the other side's value of each ref to transfer;
2. walk from the refs that differ, skipping every subtree the destination has
   (see :mod:`memostore.remote.walk` for the invariant that makes this sound);
3. move the missing objects in parallel, children before parents, each one
   verified by digest on arrival when pulled;
4. only then update refs, each by compare-and-swap. A ref that the other side
   holds with a different value is kept as it is (both are valid results of
   the same call) unless ``force`` is given.

Each ref is its own file, so two pushers of different evaluations never touch
the same file; two pushers of the same key race on one compare-and-swap and
the loser keeps the winner's value. An interrupted transfer is resumed by
running it again: objects already sent are skipped, refs were not yet written.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import (
    MalformedObject,
    MemostoreError,
    ObjectNotFound,
    RefError,
    warn,
)
from ..odb import index
from ..odb.objects import FORMAT_VERSION, KIND_EVALUATION, Doc, is_object_id
from ..odb.refs import check_ref_name
from ..transport import (
    DirectoryTransport,
    NotFoundOnRemote,
    RemoteError,
    RemoteObjectTooLarge,
    Transport,
    UnsafeRemotePath,
)
from ..transport.config import RemoteConfig, get_remote, open_remote
from . import origin_sync, signature_sync
from .salvage import Damage
from .selection import select_refs, target_problem
from .transfer import (
    CorruptRemoteObject,
    RemotePresence,
    TransferProgress,
    download,
    local_presence,
    read_local_doc,
    read_remote_doc,
    run_waves,
    upload,
)
from .walk import object_name, plan_transfer

if TYPE_CHECKING:
    from ..odb.store import Store

DEFAULT_JOBS = 8
REFS_PREFIX = "refs/"
_CAS_ATTEMPTS = 8
# The most bytes a remote's ref and FORMAT file are read for: a ref holds one id and
# a newline (65 bytes), FORMAT one short line. Anything bigger is never read whole.
REF_MAX_BYTES = 4096
FORMAT_MAX_BYTES = 256


@dataclass
class SyncReport:
    """What a push or pull did.

    Attributes:
        direction: ``push`` or ``pull``.
        remote: the remote's URL.
        objects: objects this call stored on the destination.
        bytes: their total size.
        refs_updated: refs created or moved on the destination.
        refs_unchanged: refs that already had the same value.
        refs_kept: refs the destination holds with another value, left as they
            are (use ``force`` to overwrite).
        skipped: refs not transferred, with the reason (invalid names, refs
            whose evaluation does not match them).
        seconds: wall time.
    """

    direction: str
    remote: str
    objects: int = 0
    bytes: int = 0
    refs_updated: list[str] = field(default_factory=list)
    refs_unchanged: int = 0
    refs_kept: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def up_to_date(self) -> bool:
        return self.objects == 0 and not self.refs_updated

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["up_to_date"] = self.up_to_date
        return data


def ref_bytes(object_id: str) -> bytes:
    return object_id.encode("ascii") + b"\n"


def parse_ref(raw: bytes | None) -> str | None:
    """The id a ref file holds, or None when absent or damaged."""
    if raw is None:
        return None
    text = raw.decode("ascii", errors="replace").strip()
    return text if is_object_id(text) else None


def read_remote_ref(transport: Transport, name: str) -> bytes | None:
    """A remote ref's bytes (None if absent), read only if they fit a ref.

    Raises:
        RemoteObjectTooLarge: the file holds more than ``REF_MAX_BYTES``.
    """
    try:
        return transport.get_bytes_at_most(REFS_PREFIX + name, REF_MAX_BYTES)
    except NotFoundOnRemote:
        return None


def check_remote_format(transport: Transport, *, create: bool) -> None:
    """Refuse a remote that is not a store of a format this version reads.

    With *create*, an empty remote gets its ``FORMAT`` file, so that a pushed
    directory is a store in its own right (``Store(path)``, ``fsck``).
    """
    from ..odb.store import FORMAT_LINE

    try:
        raw = transport.get_bytes_at_most("FORMAT", FORMAT_MAX_BYTES)
    except RemoteObjectTooLarge as exc:
        raise RemoteError(f"{transport.url} is not a memostore remote ({exc})") from None
    except NotFoundOnRemote:
        if not create:
            raise RemoteError(
                f"{transport.url} holds no memostore store (no FORMAT file); check the URL, "
                "or push to it first"
            ) from None
        transport.add_if_new("FORMAT", FORMAT_LINE.encode("ascii"))
        return
    words = raw.decode("ascii", errors="replace").split()
    if len(words) != 2 or words[0] != "memostore" or not words[1].isdigit():
        raise RemoteError(
            f"{transport.url} is not a memostore remote (its FORMAT file says {raw[:40]!r})"
        )
    if int(words[1]) > FORMAT_VERSION:
        raise RemoteError(
            f"{transport.url} uses store format {words[1]}; upgrade memostore to use it"
        )


class _Opened:
    """A transport resolved from what the caller gave, closed only if we opened it."""

    def __init__(self, store: Store, remote: Any, purpose: str) -> None:
        if isinstance(remote, Transport):
            self.transport, self.owned = remote, False
        else:
            config = remote if isinstance(remote, RemoteConfig) else get_remote(store, remote)
            self.transport, self.owned = open_remote(config, purpose), True

    def __enter__(self) -> Transport:
        return self.transport

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.transport.close()


@contextlib.contextmanager
def worker_pool(jobs: int) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that drops queued work when the caller fails or is interrupted.

    Objects already sent stay (they are complete); a rerun resumes from there.
    """
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="memostore-sync")
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _parallel(pool: Executor, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return list(pool.map(fn, items))


def _by_key(pool: Executor, fn: Callable[[Any], Any], items: Sequence[Any]) -> dict[Any, Any]:
    """{item: fn(item)}, computed in parallel."""
    return dict(zip(items, pool.map(fn, items), strict=True))


# -- push ----------------------------------------------------------------------------------
def push(
    store: Store,
    remote: str | RemoteConfig | Transport | None = None,
    revs: Sequence[str] = (),
    *,
    jobs: int = DEFAULT_JOBS,
    force: bool = False,
    progress: TransferProgress | None = None,
) -> SyncReport:
    """Send the store's refs (or those *revs* select) and what they reach to a remote.

    Args:
        store: the local store.
        remote: a configured remote's name (default: the only one, or
            ``origin``), a URL, a :class:`RemoteConfig` or an open transport.
        revs: evaluation ids, prefixes or function names; empty for every ref.
        jobs: parallel transfers.
        force: overwrite remote refs that hold another value.
        progress: receives the transfer's progress.

    Raises:
        RemoteError: the remote failed (RemoteUnreachable: it cannot be reached).
        RevisionNotFound: a revision selects nothing.
    """
    from ..odb.revisions import resolve_revision

    started = time.perf_counter()
    progress = progress or TransferProgress()
    local_refs = dict(store.refs.iter(""))
    selected = select_refs(local_refs, revs, "this store", lambda r: resolve_revision(store, r))
    with _Opened(store, remote, "push") as transport, worker_pool(jobs) as pool:
        report = SyncReport("push", transport.url)
        check_remote_format(transport, create=True)
        damaged = getattr(store.refs, "iter_damaged", None)
        for name, reason in damaged() if damaged is not None and not revs else ():
            report.skipped[name] = reason  # ref files that cannot be read: never pushed
        push_refs(store, transport, selected, pool, report, force=force, progress=progress)
    report.seconds = time.perf_counter() - started
    _warn_skipped(report)
    return report


def push_refs(
    store: Store,
    transport: Transport,
    selected: dict[str, str],
    pool: Executor,
    report: SyncReport,
    *,
    force: bool = False,
    progress: TransferProgress | None = None,
) -> None:
    """Send the objects of *selected* (ref name -> id) to *transport*, then set the refs.

    The remote's ``FORMAT`` is the caller's to check (:func:`check_remote_format`).
    """
    progress = progress or TransferProgress()
    names = sorted(selected)
    for name in names:
        try:
            check_ref_name(name)
        except RefError:
            report.skipped[name] = "invalid ref name"
    names = [n for n in names if n not in report.skipped]
    raws = _by_key(pool, lambda n: read_remote_ref(transport, n), names)
    to_update: dict[str, str] = {}
    for name in names:
        current = parse_ref(raws[name])
        if current == selected[name]:
            report.refs_unchanged += 1
        elif not store.objects.contains(selected[name]):
            report.skipped[name] = "its evaluation is missing here; run `memostore fsck`"
        elif current is None or force:
            to_update[name] = selected[name]
        else:
            report.refs_kept.append(name)
    plan = plan_transfer(
        to_update.values(),
        RemotePresence(transport, pool, listing=not isinstance(transport, DirectoryTransport)),
        lambda ids: _parallel(pool, lambda i: read_local_doc(store.objects, i), ids),
        str(store.root or "memory store"),
    )
    # Objects this store pulled from elsewhere stay theirs on the remote too.
    origin_sync.send_origins(store, transport, plan, pool)
    sizes = {i: len(d.data) for i, d in plan.docs.items()}
    blobs = sorted(plan.blobs)
    sizes.update(_by_key(pool, _local_size(store), blobs))
    progress.start(len(plan), sum(sizes.values()))
    try:
        report.objects, report.bytes = run_waves(
            pool, plan, lambda i: upload(store.objects, transport, plan, i), sizes, progress
        )
    finally:
        progress.finish()
    # Signatures before refs: a remote ref never names an evaluation whose signature
    # has not arrived (push signs what this store made and nobody signed yet).
    sent = {selected[n]: n in to_update for n in names if n not in report.skipped}
    sent.update({v: True for v in to_update.values()})
    signature_sync.send(store, transport, sent, pool)
    outcomes = _parallel(
        pool,
        lambda n: _push_ref(transport, n, raws[n], to_update[n], force),
        sorted(to_update),
    )
    _tally(report, sorted(to_update), outcomes)


def _warn_skipped(report: SyncReport) -> None:
    """One warning for every ref a push or pull left out (the report lists each)."""
    if not report.skipped:
        return
    shown = "; ".join(f"{n}: {r}" for n, r in sorted(report.skipped.items())[:3])
    more = f"; and {len(report.skipped) - 3} more" if len(report.skipped) > 3 else ""
    warn(
        f"{report.direction} {report.remote} skipped {len(report.skipped)} "
        f"ref(s) and moved the rest ({shown}{more})"
    )


def _local_size(store: Store) -> Callable[[str], int]:
    def size(object_id: str) -> int:
        try:
            return store.objects.size_of(object_id)
        except ObjectNotFound:
            raise MemostoreError(
                f"object {object_id} is linked in this store but missing; run `memostore "
                "fsck`, then call the function that made it again (or pull it) and push again"
            ) from None

    return size


def _push_ref(transport: Transport, name: str, old: bytes | None, new: str, force: bool) -> str:
    """Compare-and-swap one remote ref; returns updated / unchanged / kept."""
    remote_name = REFS_PREFIX + name
    for _ in range(_CAS_ATTEMPTS):
        if transport.set_if_equals(remote_name, old, ref_bytes(new)):
            return "updated"
        # Someone else wrote it meanwhile: decide again on what is there now.
        old = read_remote_ref(transport, name)
        current = parse_ref(old)
        if current == new:
            return "unchanged"
        if current is not None and not force:
            return "kept"
    raise RemoteError(f"ref {name} on {transport.url} kept changing; push again")


def _tally(report: SyncReport, names: list[str], outcomes: list[str]) -> None:
    for name, outcome in zip(names, outcomes, strict=True):
        if outcome == "updated":
            report.refs_updated.append(name)
        elif outcome == "unchanged":
            report.refs_unchanged += 1
        else:
            report.refs_kept.append(name)


# -- pull ----------------------------------------------------------------------------------
def list_remote_refs(
    transport: Transport, pool: Executor, skipped: dict[str, str]
) -> dict[str, str]:
    """Every valid ref on the remote (name without ``refs/`` -> id); bad ones go to *skipped*."""
    names = []
    for full in transport.list(REFS_PREFIX):
        name = full[len(REFS_PREFIX) :]
        try:
            check_ref_name(name)
        except RefError:
            skipped[name] = "invalid ref name"
            continue
        names.append(name)
    refs: dict[str, str] = {}
    raws = _by_key(pool, lambda n: _read_listed_ref(transport, n), names)
    for name, raw in raws.items():
        if isinstance(raw, UnsafeRemotePath):
            skipped[name] = "a symbolic link on the remote (never followed)"
            continue
        if isinstance(raw, RemoteObjectTooLarge):
            skipped[name] = f"damaged ref ({raw.size} bytes or more, never read)"
            continue
        if raw is None:
            continue  # deleted since it was listed
        value = parse_ref(raw)
        if value is None:
            skipped[name] = "damaged ref (does not hold an object id)"
        else:
            refs[name] = value
    return refs


def _read_listed_ref(
    transport: Transport, name: str
) -> bytes | UnsafeRemotePath | RemoteObjectTooLarge | None:
    # A planted link or a huge file is that ref's problem, not the whole pull's.
    try:
        return read_remote_ref(transport, name)
    except (UnsafeRemotePath, RemoteObjectTooLarge) as exc:
        return exc


def pull(
    store: Store,
    remote: str | RemoteConfig | Transport | None = None,
    revs: Sequence[str] = (),
    *,
    jobs: int = DEFAULT_JOBS,
    force: bool = False,
    progress: TransferProgress | None = None,
) -> SyncReport:
    """Fetch a remote's refs (or those *revs* select) and what they reach.

    Every object is verified against its id before it is stored; nothing is
    decoded. Local refs that hold another value are kept unless *force*.
    Arguments as for :func:`push`.
    """
    started = time.perf_counter()
    with _Opened(store, remote, "pull") as transport, worker_pool(jobs) as pool:
        report = SyncReport("pull", transport.url)
        check_remote_format(transport, create=False)
        remote_refs = list_remote_refs(transport, pool, report.skipped)
        selected = select_refs(remote_refs, revs, transport.url)
        pull_refs(store, transport, selected, pool, report, force=force, progress=progress)
    report.seconds = time.perf_counter() - started
    _warn_skipped(report)
    return report


def pull_refs(
    store: Store,
    transport: Transport,
    wanted: dict[str, str],
    pool: Executor,
    report: SyncReport,
    *,
    force: bool = False,
    progress: TransferProgress | None = None,
) -> None:
    """Bring the objects of *wanted* (ref name -> id) into *store*, then set the refs."""
    progress = progress or TransferProgress()
    to_set: dict[str, tuple[str | None, str]] = {}
    unchanged: list[str] = []
    for name, value in sorted(wanted.items()):
        try:
            local = store.refs.read(name)
        except RefError:
            local = None  # a damaged local ref may be overwritten
        if local == value:
            report.refs_unchanged += 1
            unchanged.append(value)
        elif local is None or force:
            to_set[name] = (local, value)
        else:
            report.refs_kept.append(name)
    fetched: dict[str, Doc] = {}

    def read_doc(object_id: str) -> Doc:
        doc = fetched.get(object_id)
        if doc is None:
            if store.objects.contains(object_id):
                return read_local_doc(store.objects, object_id)
            doc = fetched[object_id] = read_remote_doc(transport, object_id)
        return doc

    roots = sorted({value for _, value in to_set.values()})
    root_docs = _by_key(pool, lambda i: _root_doc(read_doc, i), roots)
    for name, (_, value) in list(to_set.items()):
        doc = root_docs[value]
        problem = doc if isinstance(doc, str) else target_problem(name, doc)
        if problem is not None:
            report.skipped[name] = problem
            del to_set[name]
    # An object damaged or missing deep in one ref's tree skips that ref, not the pull.
    damage = Damage()
    read_checked = damage.reading(read_doc)
    plan = plan_transfer(
        {value for _, value in to_set.values()},
        local_presence(store.objects),
        lambda ids: [d for d in _parallel(pool, read_checked, ids) if d is not None],
        transport.url,
    )
    sizes = {i: len(d.data) for i, d in plan.docs.items()}
    blob_size = damage.sizing(lambda b: transport.stat(object_name(b)))
    sizes.update(_by_key(pool, blob_size, sorted(plan.blobs)))
    _skip_damaged(report, to_set, damage.roots_reaching(plan, roots))
    damage.keep_only(plan, {value for _, value in to_set.values()})
    # Recorded, durably, before any of them arrives: pickled code in them is loaded
    # only while their remote is trusted (see memostore/trust/origins.py).
    origin_sync.record_pull(store, transport, plan, pool)
    progress.start(len(plan), sum(sizes.get(i, 0) for i in (*plan.docs, *plan.blobs)))

    def move(object_id: str) -> bool:
        return download(store.objects, transport, plan, object_id, sizes[object_id])

    try:
        report.objects, report.bytes = run_waves(
            pool, plan, damage.moving(plan, move), sizes, progress
        )
    finally:
        progress.finish()
    # Blobs are verified as they arrive: one found corrupt skips the refs above it.
    _skip_damaged(report, to_set, damage.roots_reaching(plan, roots))
    store.objects.sync()  # objects durable before any ref names them
    arrived = [v for _, v in to_set.values() if root_docs[v].kind == KIND_EVALUATION]
    signature_sync.fetch(
        store,
        transport,
        [*arrived, *signature_sync.unsigned_from_elsewhere(store, unchanged)],
        pool,
    )
    names = sorted(to_set)
    outcomes = [_set_local_ref(store, n, *to_set[n], force) for n in names]
    _tally(report, names, outcomes)
    # Listings read the evaluation index (a cache); add what arrived, as a local
    # evaluation does when it is recorded.
    for object_id in {to_set[n][1] for n in report.refs_updated}:
        doc = root_docs[object_id]
        if doc.kind == KIND_EVALUATION:
            index.record(store, object_id, doc.body)


def _root_doc(read_doc: Callable[[str], Doc], object_id: str) -> Doc | str:
    """The document a ref names, or why that ref is skipped (it names nothing usable)."""
    try:
        return read_doc(object_id)
    except (NotFoundOnRemote, ObjectNotFound):
        return f"dangling: it names object {object_id}, which the remote does not have"
    except UnsafeRemotePath as exc:
        return f"its object {exc.name} is a symbolic link on the remote (never followed)"
    except (CorruptRemoteObject, MalformedObject, RemoteObjectTooLarge) as exc:
        return f"its object {object_id} is damaged on the remote ({exc})"


def _skip_damaged(
    report: SyncReport, to_set: dict[str, tuple[str | None, str]], damaged: dict[str, str]
) -> None:
    """Move the refs whose trees hold a damaged object from *to_set* to ``skipped``."""
    for name, (_, value) in list(to_set.items()):
        reason = damaged.get(value)
        if reason is not None:
            report.skipped[name] = (
                f"{reason}, below the object it names; nothing of it was set. Push it "
                "again from a store that has a sound copy, then pull again"
            )
            del to_set[name]


def _set_local_ref(store: Store, name: str, old: str | None, new: str, force: bool) -> str:
    for _ in range(_CAS_ATTEMPTS):
        if store.refs.set_if_equals(name, old, new):
            return "updated"
        try:
            old = store.refs.read(name)
        except RefError:
            old = None
        if old == new:
            return "unchanged"
        if old is not None and not force:
            return "kept"
    raise RefError(f"ref {name} kept changing while it was pulled; pull again")
