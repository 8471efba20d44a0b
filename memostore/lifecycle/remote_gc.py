"""gc of a remote, with the same eviction policies as a local store, through the transport.

A remote is a store's files without its local bookkeeping: refs, objects and
``FORMAT``. So gc there works from what the transport can say:

- **Roots** are the remote's refs. Evaluations are those named under
  ``evals/``, ``failed/``, ``runs/``, ``rng/`` and ``tags/``; a tagged one is
  never evicted.
- **Last use**: a remote keeps no hit log, so an evaluation's last use on a
  remote is its creation time (its record's ``started``). ``--max-size`` and
  ``--keep-last`` there evict the oldest evaluations first; ``--unused-for``
  means the same as ``--older-than``.
- **Running**: an evaluation whose record says ``running``, or whose call holds
  a live lease on the remote (exactly ``leases/<function>/<key>``; a waiter's
  marker beside it is not one), is kept.
- **Leases**: stale leases, and waiters' markers whose lease is gone, are
  deleted; on a directory remote, so are the empty directories they leave
  (``remote_leases.py``).
- **Age**: an unreachable object is deleted only once the remote says it was
  written longer ago than the grace period (its modification time, from
  :meth:`~memostore.transport.base.Transport.scan`). Where the transport cannot
  say, unreachable objects are kept (unless the grace period is 0).

Concurrent pushes: a push writes its objects first and its refs last, so until
then its new objects are unreachable; they are young, and kept. A push may also
find an object already on the remote and skip sending it, then publish a ref
that needs it: if that object was unreachable garbage, gc may delete it in
between. gc therefore lists the refs a third time after deleting, walks every
ref that appeared or moved meanwhile, and sends back from the local store any
object it deleted that such a ref needs; a ref it cannot repair that way is
reported (push it again from a store that has it, with ``--force``).

Objects are deleted parents first, so a remote keeps its invariant (an object
present implies everything it links to is present) for the objects gc knew.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MalformedObject, MemostoreError, ObjectNotFound
from ..odb.objects import KIND_EVALUATION, Doc, is_object_id
from ..remote import signature_sync
from ..remote.sync import check_remote_format, list_remote_refs, parse_ref, read_remote_ref
from ..remote.transfer import CorruptRemoteObject, read_remote_doc
from ..remote.walk import checked_links, object_name
from ..transport import NotFoundOnRemote, Transport, UnsafeRemotePath
from ..transport.config import RemoteConfig, get_remote, open_remote
from .eviction import EvictionPolicy, EvictionReport, choose, protect
from .maintenance import DEFAULT_GRACE_S
from .remote_leases import (
    LeaseSurvey,
    counted,
    prune_lease_dirs,
    remove_leases,
    survey_leases,
)
from .usage import EVALUATION_REF_PREFIXES, EvaluationUsage, StoreUsage

if TYPE_CHECKING:
    from ..odb.store import Store

DEFAULT_JOBS = 8
_OBJECTS = "objects/"


@dataclass
class RemoteGcReport:
    """What gc of a remote evicted and freed (or, with dry_run, would)."""

    remote: str
    dry_run: bool
    eviction: EvictionReport | None = None
    refs_removed: list[str] = field(default_factory=list)
    objects_deleted: int = 0
    bytes_freed: int = 0
    reachable: int = 0
    kept_young: int = 0
    kept_undated: int = 0  # unreachable, but the remote gives no modification time
    leases_removed: int = 0  # stale leases: their holders are gone
    markers_removed: int = 0  # waiters' markers left beside no live lease
    restored: list[str] = field(default_factory=list)
    damaged_refs: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["eviction"] = self.eviction.to_json() if self.eviction is not None else None
        return data


class _Graph:
    """The links of the remote's documents, each read once (in parallel, level by level)."""

    def __init__(self, transport: Transport, pool: Executor) -> None:
        self.transport = transport
        self.pool = pool
        self.links: dict[str, tuple[set[str], set[str]]] = {}
        self.docs: dict[str, Doc] = {}
        self.unreadable: dict[str, str] = {}

    def load(self, roots: Iterable[str]) -> None:
        frontier = [r for r in dict.fromkeys(roots) if r not in self.links]
        while frontier:
            read = list(self.pool.map(self._read, frontier))
            nxt: list[str] = []
            for object_id, doc in zip(frontier, read, strict=True):
                if isinstance(doc, str):
                    self.unreadable[object_id] = doc
                    self.links[object_id] = (set(), set())
                    continue
                docs, blobs = checked_links(doc, self.transport.url)
                self.links[object_id] = (docs, blobs)
                if doc.kind == KIND_EVALUATION:
                    self.docs[object_id] = doc
                nxt.extend(d for d in docs if d not in self.links)
            frontier = list(dict.fromkeys(nxt))

    def _read(self, object_id: str) -> Doc | str:
        try:
            return read_remote_doc(self.transport, object_id)
        except NotFoundOnRemote:
            return "missing"
        except (CorruptRemoteObject, MalformedObject, UnsafeRemotePath) as exc:
            return f"damaged ({exc})"

    def closure(self, root: str) -> frozenset[str]:
        seen = {root}
        stack = [root]
        while stack:
            docs, blobs = self.links.get(stack.pop(), (set(), set()))
            seen |= blobs
            for d in docs:
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return frozenset(seen)


def _listing(transport: Transport) -> dict[str, tuple[int, float | None]]:
    """Every object on the remote: id -> (size, modification time or None)."""
    out = {}
    for entry in transport.scan(_OBJECTS):
        parts = entry.name.split("/")
        if len(parts) != 3:
            continue
        object_id = parts[1] + parts[2]
        if len(parts[1]) == 2 and is_object_id(object_id):
            out[object_id] = (entry.size or 0, entry.modified)
    return out


def _usage(
    refs: dict[str, str], graph: _Graph, listing: dict[str, tuple[int, float | None]]
) -> StoreUsage:
    named: dict[str, list[str]] = {}
    other: set[str] = set()
    for name, target in refs.items():
        if name.startswith(EVALUATION_REF_PREFIXES) and target in graph.docs:
            named.setdefault(target, []).append(name)
        else:
            other.add(target)  # not an evaluation we can read: kept whole, never evicted
    reach: Counter[str] = Counter()
    evaluations = {}
    for eid, names in named.items():
        body = graph.docs[eid].body
        objects = graph.closure(eid)
        reach.update(objects)
        started = body.get("started")
        evaluations[eid] = EvaluationUsage(
            id=eid,
            function=str(body.get("function") or "?"),
            refs=sorted(names),
            started=float(started) if isinstance(started, (int, float)) else 0.0,
            status=str(body.get("status") or "?"),
            objects=objects,
        )
    pinned: set[str] = set()
    for root in other:
        pinned |= graph.closure(root)
    sizes = {i: size for i, (size, _) in listing.items()}
    return StoreUsage(
        object_sizes=sizes,
        total_bytes=sum(sizes.values()),
        other_bytes=0,
        evaluations=evaluations,
        reach_count=dict(reach),
        pinned=frozenset(pinned),
    )


def _leased(leases: LeaseSurvey, usage: StoreUsage) -> set[str]:
    """Evaluations whose call holds a live lease on the remote (computed again right now)."""
    if not leases.live:
        return set()
    running = set()
    for eid, ev in usage.evaluations.items():
        for ref in ev.refs:
            space, _, call = ref.partition("/")
            if space in ("evals", "failed") and call in leases.live:
                running.add(eid)
    return running


def gc_remote(
    store: Store,
    remote: str | RemoteConfig | Transport | None,
    policy: EvictionPolicy | None = None,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = False,
    jobs: int = DEFAULT_JOBS,
) -> RemoteGcReport:
    """Evict what *policy* chooses on a remote, then delete what no remote ref reaches.

    Stale leases and the markers their waiters left go too (``remote_leases.py``).

    Args:
        store: the local store (names the remote; repairs what a concurrent push needed).
        remote: a configured remote's name, a URL, a RemoteConfig or an open transport.
        policy: eviction policy; None or empty: plain gc.
        grace_s: unreachable objects written less long ago, evaluations created less
            long ago, leases renewed less long ago and markers written less long ago
            are kept.
        dry_run: report what would go; change nothing.
        jobs: parallel remote requests.

    Raises:
        RemoteError: the remote failed or is not a memostore remote.
    """
    started = time.perf_counter()
    policy = policy or EvictionPolicy()
    owned = not isinstance(remote, Transport)
    if isinstance(remote, Transport):
        transport = remote
    else:
        config = remote if isinstance(remote, RemoteConfig) else get_remote(store, remote)
        transport = open_remote(config, "push")
    try:
        with ThreadPoolExecutor(jobs, thread_name_prefix="memostore-gc") as pool:
            report = RemoteGcReport(transport.url, dry_run)
            _run(store, transport, pool, policy, grace_s, dry_run, report)
    finally:
        if owned:
            transport.close()
    report.seconds = time.perf_counter() - started
    return report


def _run(
    store: Store,
    transport: Transport,
    pool: Executor,
    policy: EvictionPolicy,
    grace_s: float,
    dry_run: bool,
    report: RemoteGcReport,
) -> None:
    check_remote_format(transport, create=False)
    refs = list_remote_refs(transport, pool, report.skipped)
    graph = _Graph(transport, pool)
    graph.load(refs.values())
    _refuse_damaged(refs, graph)
    listing = _listing(transport)
    now = time.time()
    usage = _usage(refs, graph, listing)
    # A remote keeps no record of hits: an evaluation's last use there is its creation.
    last = {eid: ev.started for eid, ev in usage.evaluations.items()}
    running = {e for e, ev in usage.evaluations.items() if ev.status == "running"}
    leases = survey_leases(transport, pool, grace_s, now)
    running |= _leased(leases, usage)
    protected = protect(usage, last, running, grace_s=grace_s, now=now)
    if not policy.empty:
        report.eviction = choose(usage, policy, last, protected, now=now)
        report.eviction.dry_run = dry_run
    evicted = {e.id for e in report.eviction.evicted} if report.eviction else set()
    if dry_run:
        kept_refs = {n: t for n, t in refs.items() if t not in evicted or n.startswith("tags/")}
        report.refs_removed = sorted(n for n in refs if n not in kept_refs)
    else:
        report.refs_removed = _remove_refs(transport, refs, evicted)
        # Refs published meanwhile (a push) keep what they reach.
        kept_refs = list_remote_refs(transport, pool, {})
        graph.load(kept_refs.values())
    marked: set[str] = set()
    for target in kept_refs.values():
        marked |= graph.closure(target)
    report.reachable = len(marked & set(listing))
    garbage = _garbage(listing, marked, grace_s, now, report)
    if dry_run:
        report.objects_deleted = len(garbage)
        report.bytes_freed = sum(listing[i][0] for i in garbage)
        report.leases_removed, report.markers_removed = counted(leases)
        return
    deleted = _delete(transport, pool, garbage, graph, listing, report)
    _repair(store, transport, pool, graph, marked, deleted, kept_refs, report)
    signature_sync.prune(transport, deleted, pool)
    report.leases_removed, report.markers_removed = remove_leases(transport, leases)
    prune_lease_dirs(transport)


def _refuse_damaged(refs: dict[str, str], graph: _Graph) -> None:
    """Stop before deleting anything when a ref's own object cannot be read."""
    for name, target in sorted(refs.items()):
        why = graph.unreadable.get(target)
        if why is not None and why != "missing":
            raise MemostoreError(
                f"gc stopped before deleting anything: remote ref {name} names object "
                f"{target}, which is {why}; push a sound copy with `memostore push --force`, "
                "or delete that ref on the remote, then run gc again"
            )


def _remove_refs(transport: Transport, refs: dict[str, str], evicted: set[str]) -> list[str]:
    """Delete the remote refs naming evicted evaluations (never tags), if unchanged."""
    removed = []
    for name, target in sorted(refs.items()):
        if target not in evicted or name.startswith("tags/"):
            continue
        # Read again for the exact bytes, then delete only those: a ref a push moved
        # since we listed it (or moves now) keeps its new value.
        data = read_remote_ref(transport, name)
        if data is None or parse_ref(data) != target:
            continue
        if transport.delete_if_equals("refs/" + name, data):
            removed.append(name)
    return removed


def _garbage(
    listing: dict[str, tuple[int, float | None]],
    marked: set[str],
    grace_s: float,
    now: float,
    report: RemoteGcReport,
) -> list[str]:
    garbage = []
    for object_id, (_, modified) in listing.items():
        if object_id in marked:
            continue
        if modified is None and grace_s > 0:
            report.kept_undated += 1
        elif modified is not None and now - modified < grace_s:
            report.kept_young += 1  # maybe sent by a push whose refs are not written yet
        else:
            garbage.append(object_id)
    return garbage


def _delete(
    transport: Transport,
    pool: Executor,
    garbage: list[str],
    graph: _Graph,
    listing: dict[str, tuple[int, float | None]],
    report: RemoteGcReport,
) -> set[str]:
    """Delete *garbage*, parents before children; return what was deleted."""
    # Objects gc never read cannot be children of ones it read (their links are known,
    # and reached): delete them first, then the known ones from the top down.
    height: dict[str, int] = {}

    def height_of(object_id: str) -> int:
        stack = [object_id]
        while stack:
            node = stack[-1]
            if node in height:
                stack.pop()
                continue
            docs, blobs = graph.links.get(node, (set(), set()))
            todo = [c for c in docs if c not in height and c in graph.links]
            if todo:
                stack.extend(todo)
                continue
            known = [height[c] for c in docs if c in height] + [0 for _ in blobs]
            height[node] = 1 + max(known, default=-1)
            stack.pop()
        return height[object_id]

    unknown = [i for i in garbage if i not in graph.links]
    known = sorted((i for i in garbage if i in graph.links), key=height_of, reverse=True)
    for batch in (unknown, known):
        # Within a batch, one level at a time: a parent before its children.
        levels: dict[int, list[str]] = {}
        for object_id in batch:
            levels.setdefault(height.get(object_id, 0), []).append(object_id)
        for level in sorted(levels, reverse=True):
            list(pool.map(lambda i: transport.delete(object_name(i)), levels[level]))
    report.objects_deleted = len(garbage)
    report.bytes_freed = sum(listing[i][0] for i in garbage)
    return set(garbage)


def _repair(
    store: Store,
    transport: Transport,
    pool: Executor,
    graph: _Graph,
    marked: set[str],
    deleted: set[str],
    refs_before: dict[str, str],
    report: RemoteGcReport,
) -> None:
    """Send back deleted objects that refs published during the sweep need."""
    if not deleted:
        return
    now_refs = list_remote_refs(transport, pool, {})
    new = {n: t for n, t in now_refs.items() if refs_before.get(n) != t and t not in marked}
    for name, target in sorted(new.items()):
        lost = _lost_below(store, target, graph, deleted)
        failed = []
        for object_id in lost:  # children before parents (see _lost_below)
            if _send_back(store, transport, object_id):
                report.restored.append(object_id)
            else:
                failed.append(object_id)
        if failed:
            report.damaged_refs[name] = (
                f"published during gc, it needs {len(failed)} object(s) gc deleted "
                f"(e.g. {failed[0]}) that this store does not have; push it again with "
                "`memostore push --force` from a store that has them"
            )


def _lost_below(store: Store, root: str, graph: _Graph, deleted: set[str]) -> list[str]:
    """Deleted objects *root* reaches, children first (links read from the local store
    where the remote's copy is gone)."""
    order: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[str, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if node in deleted:
                order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        if node in graph.links and node not in deleted:
            docs, blobs = graph.links[node]
        elif node in deleted:
            docs, blobs = graph.links.get(node) or _local_links(store, node)
        else:
            graph.load([node])
            docs, blobs = graph.links.get(node, (set(), set()))
        stack.extend((child, False) for child in (*docs, *blobs))
    return order


def _local_links(store: Store, object_id: str) -> tuple[set[str], set[str]]:
    try:
        doc = store.objects.get_doc(object_id)
    except (ObjectNotFound, MalformedObject, MemostoreError):
        return set(), set()  # a blob, or not here
    return set(doc.links.docs), set(doc.links.blobs)


def _send_back(store: Store, transport: Transport, object_id: str) -> bool:
    try:
        path = store.objects.blob_path(object_id)
        if path is not None:
            transport.add_if_new(object_name(object_id), path)
        else:
            transport.add_if_new(object_name(object_id), store.objects.get_bytes(object_id))
    except (ObjectNotFound, FileNotFoundError):
        return False
    return True
