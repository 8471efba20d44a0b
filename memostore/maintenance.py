"""Store maintenance: ``fsck`` (find damage) and ``gc`` (free what nothing references).

Both walk the object graph through each document's ``links``, so neither needs
to understand any kind of document.

gc and concurrent writers: an evaluation being recorded by another process
writes its objects first and publishes its ref last, so for a while its
objects are unreachable. gc therefore never deletes an object younger than the
grace period (by file modification time), nor a temp file younger than it, and
it re-reads the refs after marking so that a ref published meanwhile keeps its
objects. An evaluation in progress lists the objects it has written so far
(its arguments and code) as pending roots (``Store.pending_roots``), and its
metric journal names the images it has logged; gc keeps both, however long
the evaluation runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import index
from .checkouts import CHECKOUTS_DIRNAME
from .errors import MalformedObject, MemostoreError, ObjectNotFound
from .inside import links_in
from .leases import LEASES_DIRNAME, remove_stale_leases
from .objects import Doc, is_doc_bytes, is_object_id, new_hasher
from .packs import PACK_MAX_BYTES, Pack
from .sweep import is_hidden, remove_checkout_leftovers, remove_lock_leftovers, remove_old_files
from .trust.origins import forget as forget_origins

# gc merges packs smaller than this once there are MERGE_MIN_PACKS of them, into
# packs of at most PACK_MAX_BYTES (see _merge_small_packs).
SMALL_PACK_BYTES = 32 << 20
MERGE_MIN_PACKS = 16
# The sweep deletes loose objects on this many threads, in batches of this many.
_DELETE_THREADS = 8
_DELETE_BATCH = 64

if TYPE_CHECKING:
    from .store import Store

DEFAULT_GRACE_S = 3600.0
DEFAULT_QUARANTINE_AGE_S = 14 * 24 * 3600.0
_READ_CHUNK = 8 << 20
# Reading a document this large whole is fine; larger objects are streamed.
_DOC_READ_MAX = 64 << 20

# progress(phase, done, total): called as work advances; total may be None.
Progress = Callable[[str, int, "int | None"], None]


def _no_progress(phase: str, done: int, total: int | None) -> None:
    return None


@dataclass
class Problem:
    """One thing fsck found wrong."""

    kind: str  # "object", "pack", "ref", "pending", "config" or "link"
    name: str  # object id, pack file name, ref name or file name
    message: str
    path: str | None = None

    def __str__(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"{self.kind} {self.name}{where}: {self.message}"


@dataclass
class FsckReport:
    """What fsck checked and found."""

    objects: int = 0
    bytes: int = 0
    refs: int = 0
    problems: list[Problem] = field(default_factory=list)
    index: str = "ok"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data


@dataclass
class GcReport:
    """What gc freed (or, with dry_run, would free)."""

    dry_run: bool = False
    reachable: int = 0
    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept_young: int = 0
    tmp_removed: int = 0
    tmp_bytes: int = 0
    quarantine_removed: int = 0
    quarantine_bytes: int = 0
    unreadable: list[str] = field(default_factory=list)
    index_entries: int | None = None
    packs_merged: int = 0
    packs_quarantined: int = 0
    origins_rewritten: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["objects_deleted"] = len(self.deleted)
        return data


# -- fsck ------------------------------------------------------------------------------------
def _read_and_hash(store: Store, object_id: str) -> tuple[str, bytes | None, int]:
    """(actual digest, the bytes when the object is a document, size), streaming blobs."""
    path = store.objects.blob_path(object_id)
    if path is None:
        data = _raw_bytes(store, object_id)
        hasher = new_hasher(len(data))
        hasher.update(data)
        return hasher.hexdigest(), data if is_doc_bytes(data) else None, len(data)
    size = os.stat(path).st_size
    hasher = new_hasher(size)
    with open(path, "rb") as f:
        first = f.read(min(size, _DOC_READ_MAX) if size else _READ_CHUNK)
        hasher.update(first)
        doc = is_doc_bytes(first)
        parts = [first] if doc else []
        while chunk := f.read(_READ_CHUNK):
            hasher.update(chunk)
            if doc:
                parts.append(chunk)
    return hasher.hexdigest(), b"".join(parts) if doc else None, size


def _raw_bytes(store: Store, object_id: str) -> bytes:
    # Not get_bytes: that would quarantine a damaged object, and fsck only reports.
    return store.objects.read_unchecked(object_id)


def fsck(store: Store, progress: Progress = _no_progress, rebuild_index: bool = True) -> FsckReport:
    """Check every object's digest, every document's links and every ref's target.

    fsck changes nothing but the evaluation index, which it rebuilds when it is
    missing or disagrees with the evaluations found (it is a cache), and the
    verified record of each object it finds damaged (so that the next read
    hashes it, finds the damage and recomputes).
    """
    report = FsckReport()
    ids = list(store.objects.iter_ids())
    present = set(ids)
    bad: set[str] = set()
    links: dict[str, tuple[set[str], set[str]]] = {}
    evaluations: dict[str, dict[str, Any]] = {}
    for done, object_id in enumerate(ids):
        progress("objects", done, len(ids))
        path = store.objects.blob_path(object_id)
        where = str(path) if path else None
        try:
            actual, data, size = _read_and_hash(store, object_id)
        except (ObjectNotFound, FileNotFoundError):
            present.discard(object_id)  # deleted while we ran (gc): not damage
            continue
        report.objects += 1
        report.bytes += size
        if actual != object_id:
            bad.add(object_id)
            # Damage its stat does not show (the disk's): no reader may trust the record.
            store.objects.forget_verified(object_id)
            report.problems.append(
                Problem("object", object_id, f"corrupt: its bytes hash to {actual}", where)
            )
            continue
        if data is None:
            continue
        try:
            doc = Doc.parse(data, object_id)
        except MemostoreError as exc:
            bad.add(object_id)
            report.problems.append(Problem("object", object_id, f"malformed: {exc}", where))
            continue
        links[object_id] = (doc.links.docs, doc.links.blobs)
        if doc.kind == "evaluation":
            evaluations[object_id] = doc.body
    progress("objects", len(ids), len(ids))
    packs = getattr(store.objects, "packs", None)
    for path, why in sorted(packs.damaged.items()) if packs is not None else ():
        if os.path.exists(path):
            name = Path(path).name
            report.problems.append(Problem("pack", name, f"not used: {why}", path))
    for object_id, (docs, blobs) in links.items():
        missing = sorted((docs | blobs) - present)
        for target in missing:
            report.problems.append(Problem("object", object_id, f"links missing object {target}"))
    _check_refs(store, report, present, bad, links, progress)
    _check_local_files(store, report)
    if rebuild_index:
        report.index = _refresh_index(store, evaluations)
    return report


def _check_refs(
    store: Store,
    report: FsckReport,
    present: set[str],
    bad: set[str],
    links: dict[str, tuple[set[str], set[str]]],
    progress: Progress,
) -> None:
    damaged = getattr(store.refs, "iter_damaged", None)
    if damaged is not None:
        for name, reason in damaged():
            report.problems.append(Problem("ref", name, reason))
    refs = list(store.refs.iter(""))
    for done, (name, target) in enumerate(refs):
        progress("refs", done, len(refs))
        report.refs += 1
        if target not in present:
            report.problems.append(Problem("ref", name, f"points to missing object {target}"))
            continue
        if target in bad:
            report.problems.append(Problem("ref", name, f"points to damaged object {target}"))
            continue
        unreachable = _broken_below(target, present, bad, links)
        if unreachable:
            shown = ", ".join(unreachable[:3]) + (" …" if len(unreachable) > 3 else "")
            report.problems.append(
                Problem(
                    "ref", name, f"reaches {len(unreachable)} missing or damaged object(s): {shown}"
                )
            )
    progress("refs", len(refs), len(refs))


def _check_local_files(store: Store, report: FsckReport) -> None:
    """Report the store's own small files that cannot be used (pending markers, config)."""
    damaged_pending = getattr(store, "damaged_pending", None)
    for path, reason in damaged_pending() if damaged_pending is not None else ():
        report.problems.append(
            Problem(
                "pending",
                path.name,
                f"{reason}; if no memoised call is running on this store, delete it",
                str(path),
            )
        )
    if store.config_path is not None:
        try:
            store.read_config()
        except MemostoreError as exc:
            report.problems.append(Problem("config", "config.json", str(exc)))
    if store.root is not None:
        _check_links(store.root, report)


def _check_links(root: Path, report: FsckReport) -> None:
    """Report every symbolic link in ``objects/`` and ``refs/``: memostore never follows one.

    A link at a ref's own name is reported by the ref check already.
    """
    for path, target in links_in(str(root), ("objects", "refs")):
        rel = os.path.relpath(path, root)
        if rel.startswith("refs" + os.sep) and not os.path.isdir(path):
            continue
        report.problems.append(
            Problem(
                "link",
                rel.replace(os.sep, "/"),
                f"a symbolic link to {target}, never followed; what lies behind it is not "
                "part of the store: replace it with a plain directory or file (or delete "
                "it) and check who made it",
                path,
            )
        )


def _broken_below(
    root: str, present: set[str], bad: set[str], links: dict[str, tuple[set[str], set[str]]]
) -> list[str]:
    broken, seen, stack = [], {root}, [root]
    while stack:
        docs, blobs = links.get(stack.pop(), (set(), set()))
        for target in docs | blobs:
            if target in seen:
                continue
            seen.add(target)
            if target not in present or target in bad:
                broken.append(target)
            elif target in docs:
                stack.append(target)
    return sorted(broken)


def _refresh_index(store: Store, evaluations: dict[str, dict[str, Any]]) -> str:
    if store.root is None:
        return "ok"
    wanted = {eid: index.entry_from_body(eid, body) for eid, body in evaluations.items()}
    current = index.load(store)
    if current == wanted:
        return "ok"
    try:
        count = index.rewrite(store, wanted.values())
    except OSError as exc:
        return f"could not rebuild ({exc})"
    return f"rebuilt ({count} evaluations)"


# -- gc ---------------------------------------------------------------------------------------
class _Marker:
    """Marks objects reachable from refs, reading each document once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.marked: set[str] = set()
        self.unreadable: set[str] = set()

    def mark_from(self, roots: Iterable[str], progress: Progress) -> None:
        stack = [r for r in roots if r not in self.marked]
        while stack:
            object_id = stack.pop()
            if object_id in self.marked:
                continue
            self.marked.add(object_id)
            if len(self.marked) % 1000 == 0:
                progress("mark", len(self.marked), None)
            docs = self._linked_docs(object_id)
            stack.extend(d for d in docs if d not in self.marked)

    def _linked_docs(self, object_id: str) -> set[str]:
        objects = self.store.objects
        if objects.pack_location(object_id, refresh=False) is not None:
            return set()  # packs hold blobs only
        path = objects.blob_path(object_id)
        if path is not None:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                if not is_doc_bytes(f.read(16)):
                    return set()  # a blob links nothing
        try:
            doc = objects.get_doc(object_id)
        except ObjectNotFound:
            self.unreadable.add(object_id)
            return set()
        except MalformedObject:
            return set()  # a blob named by a ref (memory stores have no header to peek at)
        except MemostoreError:
            # Damaged (now quarantined) or not a document: what it linked is
            # unknown; a recompute rewrites anything that gets freed.
            self.unreadable.add(object_id)
            return set()
        self.marked.update(doc.links.blobs)
        return set(doc.links.docs)


def _roots(store: Store) -> list[str]:
    """What gc keeps: every ref's target and the objects of evaluations in progress."""
    damaged = getattr(store.refs, "iter_damaged", None)
    if damaged is not None:
        # Files no ref writer makes (bad names, links) are never read as refs: not roots.
        for name, reason in damaged(foreign=False):
            raise MemostoreError(
                f"gc stopped before deleting anything: ref {name} is damaged ({reason}); "
                "delete or repair that ref file, then run gc again"
            )
    damaged_pending = getattr(store, "damaged_pending", None)
    for path, reason in damaged_pending() if damaged_pending is not None else ():
        raise MemostoreError(
            f"gc stopped before deleting anything: the pending marker {path} {reason}, so what "
            "it keeps is unknown; if no memoised call is running on this store, delete that "
            "file, then run gc again"
        )
    roots = [target for _, target in store.refs.iter("")]
    pending = getattr(store, "pending_roots", None)
    if pending is not None:
        roots.extend(pending())
    roots.extend(_journal_roots(store))
    # Only ids: a path is built from each root, and it must stay inside objects/.
    return [r for r in roots if is_object_id(r)]


def _journal_roots(store: Store) -> set[str]:
    """Objects that metric journals in progress already stored (logged images)."""
    try:
        from .metrics.recover import journal_roots
    except ImportError:
        return set()
    try:
        return {r for r in journal_roots(store) if isinstance(r, str)}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        where = store.root / "journal" if store.root is not None else "journal/"
        raise MemostoreError(
            f"gc stopped before deleting anything: a metric journal in {where} is malformed "
            f"({type(exc).__name__}: {exc}), so the images it keeps are unknown; move the "
            "damaged journal out of the store, then run gc again"
        ) from exc


def _age_s(path: Path | None, now: float) -> float:
    if path is None:
        return float("inf")  # in-memory objects have no writer in another process
    try:
        return now - os.lstat(path).st_mtime
    except FileNotFoundError:
        return float("inf")


def gc(
    store: Store,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = False,
    quarantine_age_s: float = DEFAULT_QUARANTINE_AGE_S,
    progress: Progress = _no_progress,
) -> GcReport:
    """Delete objects no ref reaches, stale temp files and old quarantined objects.

    Args:
        store: the store.
        grace_s: objects and temp files younger than this are kept (they may
            belong to an evaluation another process is recording).
        dry_run: report what would be freed; delete nothing.
        quarantine_age_s: quarantined (damaged) objects older than this are deleted.
        progress: progress callback ``(phase, done, total)``.

    Raises:
        MemostoreError: a ref is damaged (nothing is deleted then).
    """
    report = GcReport(dry_run=dry_run)
    marker = _Marker(store)
    marker.mark_from(_roots(store), progress)
    ids = list(store.objects.iter_ids())
    # Refs published (and evaluations started) while we marked keep their objects too.
    marker.mark_from(_roots(store), progress)
    report.reachable = len(marker.marked & set(ids))
    report.unreadable = sorted(marker.unreadable)
    now = time.time()
    kept: set[str] = set()
    doomed: list[tuple[str, int]] = []
    packed_garbage: dict[str, tuple[Pack, list[str]]] = {}
    for done, object_id in enumerate(ids):
        progress("sweep", done, len(ids))
        if object_id in marker.marked:
            kept.add(object_id)
            continue
        loc = store.objects.pack_location(object_id, refresh=False)
        if loc is not None:
            packed_garbage.setdefault(loc.pack.name, (loc.pack, []))[1].append(object_id)
            continue
        if _age_s(store.objects.blob_path(object_id), now) < grace_s:
            report.kept_young += 1
            kept.add(object_id)
            continue
        try:
            size = store.objects.size_of(object_id)
        except ObjectNotFound:
            continue
        if not dry_run:
            doomed.append((object_id, size))
            continue
        report.deleted.append(object_id)
        report.bytes_freed += size
    progress("sweep", len(ids), len(ids))
    for object_id, size, deleted in _delete_loose(store, doomed, grace_s):
        if deleted:
            report.deleted.append(object_id)
            report.bytes_freed += size
        else:
            report.kept_young += 1
            kept.add(object_id)
    for pack, garbage in packed_garbage.values():
        _sweep_pack(store, pack, garbage, now - grace_s, dry_run, report, kept)
    if not dry_run:
        # After the sweep: a record goes only once its object is gone.
        report.origins_rewritten = forget_origins(store, report.deleted, now - grace_s)
        report.packs_merged = _merge_small_packs(store, now - grace_s)
        quarantine = getattr(store.objects, "quarantine_damaged_packs", None)
        report.packs_quarantined = quarantine() if quarantine is not None else 0
    if store.root is not None:
        report.tmp_removed, report.tmp_bytes = remove_old_files(
            store.root / "tmp", now - grace_s, dry_run
        )
        report.quarantine_removed, report.quarantine_bytes = remove_old_files(
            store.root / "quarantine", now - quarantine_age_s, dry_run
        )
        leftovers, leftover_bytes = remove_lock_leftovers(
            store.root / "refs", now - grace_s, dry_run
        )
        report.tmp_removed += leftovers
        report.tmp_bytes += leftover_bytes
        leftovers, leftover_bytes = remove_checkout_leftovers(
            store.root / CHECKOUTS_DIRNAME, now - grace_s, dry_run
        )
        report.tmp_removed += leftovers
        report.tmp_bytes += leftover_bytes
        # Leases of memoised calls whose holder is gone (leases.py), and their lock leftovers.
        for removed in (
            remove_stale_leases(str(store.root), now - grace_s, dry_run),
            remove_lock_leftovers(store.root / LEASES_DIRNAME, now - grace_s, dry_run),
        ):
            report.tmp_removed += removed[0]
            report.tmp_bytes += removed[1]
        # Half-written pending markers of killed writers (hidden temp files).
        leftovers, leftover_bytes = remove_old_files(
            store.root / "pending", now - grace_s, dry_run, is_hidden
        )
        report.tmp_removed += leftovers
        report.tmp_bytes += leftover_bytes
        if not dry_run and report.deleted:
            entries = index.load(store)
            with contextlib.suppress(OSError):
                report.index_entries = index.rewrite(
                    store, (e for eid, e in entries.items() if eid in kept)
                )
    return report


def _delete_loose(
    store: Store, doomed: list[tuple[str, int]], grace_s: float
) -> list[tuple[str, int, bool]]:
    """Delete loose objects, several at a time: (id, size, whether it went) for each.

    Each one is an unlink of the object and one of its verified record; file
    systems take those far faster concurrently than one after another
    (measured here: 0.2 ms against 2.5 ms each). The age is checked again
    just before each unlink: a writer that found the object present since the
    sweep looked refreshed its modification time, and relies on it.
    """

    def delete(batch: list[tuple[str, int]]) -> list[tuple[str, int, bool]]:
        out = []
        for object_id, size in batch:
            young = _age_s(store.objects.blob_path(object_id), time.time()) < grace_s
            if not young:
                store.objects.delete(object_id)
            out.append((object_id, size, not young))
        return out

    if store.root is None or len(doomed) < _DELETE_BATCH:
        return delete(doomed)
    step = _DELETE_BATCH
    batches = [doomed[i : i + step] for i in range(0, len(doomed), step)]
    with ThreadPoolExecutor(_DELETE_THREADS, thread_name_prefix="memostore-gc") as pool:
        return [item for done in pool.map(delete, batches) for item in done]


def _sweep_pack(
    store: Store,
    pack: Pack,
    garbage: list[str],
    older_than: float,
    dry_run: bool,
    report: GcReport,
    kept: set[str],
) -> None:
    """Free the unreachable members of one pack: the whole file when none is
    reachable, else by rewriting the reachable ones into a new pack (as git
    repacks). A pack younger than the grace period is left as it is."""
    try:
        young = os.stat(pack.path).st_mtime > older_than
    except FileNotFoundError:
        return  # rewritten or removed by another gc since we listed it
    if young:
        report.kept_young += len(garbage)
        kept.update(garbage)
        return
    dead = set(garbage)
    live = [i for i in pack.members if i not in dead]
    report.deleted.extend(garbage)
    report.bytes_freed += pack.size if not live else sum(pack.members[i][1] for i in garbage)
    if dry_run:
        return
    objects: Any = store.objects
    if live:
        objects.rewrite_pack(pack, live)
    else:
        objects.remove_pack(pack)
    for object_id in garbage:
        objects.delete(object_id)  # a loose copy, if one was also written


def _merge_small_packs(store: Store, older_than: float) -> int:
    """Merge small packs into bigger ones; return how many packs were merged.

    Every result writes a pack of its own, and each pack costs a process its
    index read (about 15 us) the first time it looks for an object: thousands
    of small packs would slow every process's first lookup. Runs after the
    sweep, so the packs merged hold reachable objects only; packs younger than
    the grace period are left to the writers that may still be using them.
    """
    objects: Any = store.objects
    packs = getattr(objects, "packs", None)
    if packs is None:
        return 0
    small = []
    for pack in packs.packs():
        try:
            if pack.size < SMALL_PACK_BYTES and os.stat(pack.path).st_mtime <= older_than:
                small.append(pack)
        except FileNotFoundError:
            continue
    if len(small) < MERGE_MIN_PACKS:
        return 0
    merged = batch_bytes = 0
    batch: list[Pack] = []
    for pack in [*sorted(small, key=lambda p: p.name), None]:
        full = pack is None or batch_bytes + pack.size > PACK_MAX_BYTES
        if full and len(batch) > 1:
            objects.repack([(p, list(p.members)) for p in batch])
            merged += len(batch)
        if full:
            batch, batch_bytes = [], 0
        if pack is not None:
            batch.append(pack)
            batch_bytes += pack.size
    return merged
