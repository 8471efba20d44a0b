"""Store maintenance: ``gc`` (free what nothing references); ``fsck`` lives in fsck.py.

gc walks the object graph through each document's ``links``, so it needs to
understand no kind of document.

gc and concurrent writers: an evaluation being recorded by another process
writes its objects first and publishes its ref last, so for a while its
objects are unreachable. gc therefore never deletes an object younger than the
grace period (by file modification time), nor a temp file younger than it, and
it re-reads the refs after marking so that a ref published meanwhile keeps its
objects. An evaluation in progress lists the objects it has written so far
(its arguments and code) as pending roots (``Store.pending_roots``), and its
metric journal names the images it has logged; gc keeps both, however long
the evaluation runs.

Marking takes a document's links from the links cache (``index/links``,
``lifecycle/links_cache.py``) where the cache may be trusted, and reads the
document otherwise. An entry is a fact about the content its id names, so it
cannot go stale; what could make it lie, and why gc still may trust it:

- a torn or malformed line: never parsed into an entry (the shape check), so
  the document is read;
- a line written from bytes that were not the object: the links of a
  document are recorded only after the document was read whole and checked
  against its id (a damaged one never gets an entry);
- a verdict that was not checked: an object recorded as "links nothing"
  because its header was not a document's (a blob, as gc itself would peek
  it) may have been a damaged document that a recompute has since rewritten.
  gc trusts an entry that links nothing only when it also records that its
  object was read and checked as a document; otherwise it looks again, as it
  would without a cache;
- damage to the cache file itself (a changed digit in a listed id): an entry
  is used only when every id it links is in the store's listing, which a
  mangled id fails; the document is read then.

A well-formed line written on purpose to leave a link out is believed: the
cache is a file of the store, and whoever can write the store can delete its
objects as well (docs/format.md, "Links cache"). fsck never uses the cache:
it reads and checks every document itself, so it names what such a line freed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MalformedObject, MemostoreError, ObjectNotFound
from ..odb import index
from ..odb.checkouts import CHECKOUTS_DIRNAME
from ..odb.fsck import FsckReport, Problem, Progress, fsck, no_progress
from ..odb.leases import LEASES_DIRNAME, remove_stale_leases
from ..odb.objects import is_doc_bytes, is_object_id
from ..odb.packs import PACK_MAX_BYTES, Pack
from ..odb.sweep import (
    is_hidden,
    remove_checkout_leftovers,
    remove_lock_leftovers,
    remove_old_files,
)
from ..trust.origins import forget as forget_origins
from . import links_cache
from .loose_sweep import LoosePaths, age_and_size, delete_unless_young

if TYPE_CHECKING:
    from ..odb.store import Store

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_QUARANTINE_AGE_S",
    "MERGE_MIN_PACKS",
    "SMALL_PACK_BYTES",
    "FsckReport",
    "GcReport",
    "Problem",
    "Progress",
    "fsck",
    "gc",
]

# gc merges packs smaller than this once there are MERGE_MIN_PACKS of them, into
# packs of at most PACK_MAX_BYTES (see _merge_small_packs).
SMALL_PACK_BYTES = 32 << 20
MERGE_MIN_PACKS = 16

DEFAULT_GRACE_S = 3600.0
DEFAULT_QUARANTINE_AGE_S = 14 * 24 * 3600.0


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
    links_entries: int | None = None
    packs_merged: int = 0
    packs_quarantined: int = 0
    origins_rewritten: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["objects_deleted"] = len(self.deleted)
        return data


# -- gc ---------------------------------------------------------------------------------------
class _Marker:
    """Marks objects reachable from refs, reading each document at most once.

    A document's links come from the links cache where it may be trusted (see
    the module's docstring), else from the document itself.
    """

    def __init__(self, store: Store, present: set[str]) -> None:
        self.store = store
        self.marked: set[str] = set()
        self.unreadable: set[str] = set()
        self.present = present  # every object the store listed before marking
        self.known = links_cache.load(store)
        self.documents = links_cache.load_documents(store)

    def mark_from(self, roots: Iterable[str], progress: Progress) -> None:
        marked, known, documents, present = self.marked, self.known, self.documents, self.present
        stack = [r for r in roots if r not in marked]
        while stack:
            object_id = stack.pop()
            if object_id in marked:
                continue
            marked.add(object_id)
            if len(marked) % 1000 == 0:
                progress("mark", len(marked), None)
            entry = known.get(object_id)
            if (
                entry is not None
                and (entry[1] or entry[2] or object_id in documents)
                and present.issuperset(entry[1])
                and present.issuperset(entry[2])
            ):
                docs, blobs = entry[1], entry[2]
            else:
                docs, blobs = self._read_links(object_id)
            marked.update(blobs)
            stack.extend(d for d in docs if d not in marked)

    def _read_links(self, object_id: str) -> tuple[Iterable[str], Iterable[str]]:
        """(linked documents, linked blobs) of one object, from the object itself."""
        objects = self.store.objects
        if objects.pack_location(object_id, refresh=False) is not None:
            return (), ()  # packs hold blobs only
        path = objects.blob_path(object_id)
        if path is not None:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                if not is_doc_bytes(f.read(16)):
                    return (), ()  # a blob links nothing
        try:
            doc = objects.get_doc(object_id)
        except ObjectNotFound:
            self.unreadable.add(object_id)
            return (), ()
        except MalformedObject:
            return (), ()  # a blob named by a ref (memory stores have no header to peek at)
        except MemostoreError:
            # Damaged (now quarantined) or not a document: what it linked is
            # unknown; a recompute rewrites anything that gets freed.
            self.unreadable.add(object_id)
            return (), ()
        return doc.links.docs, doc.links.blobs


def _roots(store: Store) -> list[str]:
    """What gc keeps: every ref's target and the objects of evaluations in progress."""
    list_checked = getattr(store.refs, "list_checked", None)
    if list_checked is not None:
        # One read of each ref file: the listing names the damaged ones as it goes.
        refs, damaged = list_checked()
    else:
        refs, damaged = list(store.refs.iter("")), []
    # Files no ref writer makes (bad names, links) are never read as refs: not roots.
    for name, reason in damaged:
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
    roots = [target for _, target in refs]
    pending = getattr(store, "pending_roots", None)
    if pending is not None:
        roots.extend(pending())
    roots.extend(_journal_roots(store))
    # Only ids: a path is built from each root, and it must stay inside objects/.
    return [r for r in roots if is_object_id(r)]


def _journal_roots(store: Store) -> set[str]:
    """Objects that metric journals in progress already stored (logged images)."""
    try:
        from ..metrics.recover import journal_roots
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


def gc(
    store: Store,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = False,
    quarantine_age_s: float = DEFAULT_QUARANTINE_AGE_S,
    progress: Progress = no_progress,
    roots: Iterable[str] | None = None,
) -> GcReport:
    """Delete objects no ref reaches, stale temp files and old quarantined objects.

    Args:
        store: the store.
        grace_s: objects and temp files younger than this are kept (they may
            belong to an evaluation another process is recording).
        dry_run: report what would be freed; delete nothing.
        quarantine_age_s: quarantined (damaged) objects older than this are deleted.
        progress: progress callback ``(phase, done, total)``.
        roots: what the caller found the store's roots to be a moment ago
            (eviction: those of its plan, less what it removed), marked in place
            of a first listing of the refs. The listing made after marking is
            made all the same, so a ref published since keeps its objects.

    Raises:
        MemostoreError: a ref is damaged (nothing is deleted then).
    """
    report = GcReport(dry_run=dry_run)
    objects: Any = store.objects
    # Listed before marking: an object written later is not swept (and the
    # marker uses the listing to check the links cache's entries).
    ids = list(objects.iter_ids())
    present = set(ids)
    marker = _Marker(store, present)
    marker.mark_from(_roots(store) if roots is None else roots, progress)
    # Refs published (and evaluations started) while we marked keep their objects too.
    marker.mark_from(_roots(store), progress)
    marked = marker.marked
    report.reachable = len(marked & present)
    report.unreadable = sorted(marker.unreadable)
    now = time.time()
    kept: set[str] = set()
    doomed: list[tuple[str, str]] = []
    packed_garbage: dict[str, tuple[Pack, list[str]]] = {}
    loose_path = LoosePaths(objects)
    for done, object_id in enumerate(ids):
        progress("sweep", done, len(ids))
        if object_id in marked:
            kept.add(object_id)
            continue
        loc = objects.pack_location(object_id, refresh=False)
        if loc is not None:
            packed_garbage.setdefault(loc.pack.name, (loc.pack, []))[1].append(object_id)
            continue
        path = loose_path(object_id)
        if path is not None and not dry_run:
            doomed.append((object_id, path))  # its age is read just before its unlink
            continue
        age, size = age_and_size(objects, object_id, path, now)
        if size is None:
            continue  # deleted meanwhile
        if age < grace_s:
            report.kept_young += 1
            kept.add(object_id)
            continue
        if not dry_run:
            objects.delete(object_id)  # an in-memory store
        report.deleted.append(object_id)
        report.bytes_freed += size
    progress("sweep", len(ids), len(ids))
    deleted, young = delete_unless_young(objects, doomed, grace_s)
    for object_id, size in deleted:
        report.deleted.append(object_id)
        report.bytes_freed += size
    report.kept_young += len(young)
    kept.update(young)
    for pack, garbage in packed_garbage.values():
        _sweep_pack(store, pack, garbage, now - grace_s, dry_run, report, kept)
    if not dry_run:
        # After the sweep: a record goes only once its object is gone.
        report.origins_rewritten = forget_origins(store, report.deleted, now - grace_s)
        # A signature is written after its evaluation: one whose evaluation is gone is stale.
        for evaluation_id in list(store.signatures.ids()):
            if not objects.contains(evaluation_id):
                store.signatures.remove(evaluation_id)
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
            # The links cache too: entries of deleted objects are dead weight. Every
            # other entry stays (objects written since the listing included).
            gone = set(report.deleted)
            with contextlib.suppress(OSError):
                report.links_entries = links_cache.rewrite(
                    store, [i for i in links_cache.load(store) if i not in gone]
                )
    return report


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
