"""Byte accounting: what each evaluation holds on disk, alone and shared with others.

The object graph is walked through each document's ``links`` (as gc marks it),
from every ref and from what gc keeps besides (evaluations in progress, metric
journals). The links of documents and the sizes of loose objects come from the
links cache (``links_cache.py``), so a store accounted once is accounted again
without reading a document or stating a file.

Sizes are the bytes the objects take in the store: a loose object its file; a
packed object its bytes in its pack, with the padding before it and its index
record (the pack's trailer goes to its first member), so that the sizes of all
objects add up to the size of the files under ``objects/`` and ``packs/``.

What an evaluation *reaches* is every object gc keeps because of it: its own
document and everything linked from there, including the objects of its parent
evaluations (a result passed on keeps its producer). Its *exclusive* bytes are
those no other root reaches (what the next gc frees once its refs are gone);
its *shared* bytes the rest.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MalformedObject, MemostoreError, ObjectNotFound
from ..odb import index
from ..odb.collector import collector_paused
from ..odb.objects import KIND_EVALUATION, is_doc_bytes, is_object_id
from . import links_cache
from .links_cache import EvaluationInfo

if TYPE_CHECKING:
    from ..odb.packs import Pack
    from ..odb.store import Store

# Ref namespaces whose refs name evaluations (tags included: tags.py).
EVALUATION_REF_PREFIXES = ("evals/", "failed/", "runs/", "rng/", "tags/")

_FAN_RE = re.compile(r"[0-9a-f]{2}")
_REST_RE = re.compile(r"[0-9a-f]{62}")

# progress(phase, done, total), as maintenance.py's callbacks.
Progress = Callable[[str, int, "int | None"], None]


def no_progress(phase: str, done: int, total: int | None) -> None:
    return None


@dataclass
class EvaluationUsage:
    """One evaluation that refs name, and every object it reaches (itself included)."""

    id: str
    function: str
    refs: list[str]
    started: float
    status: str
    objects: frozenset[str] = field(repr=False)


@dataclass
class FunctionUsage:
    """The evaluations of one function, together.

    Attributes:
        function: the recorded function symbol.
        evaluations: their ids.
        bytes: what they reach, counted once.
        exclusive_bytes: what the next gc frees if all of them go.
    """

    function: str
    evaluations: list[str]
    bytes: int
    exclusive_bytes: int

    @property
    def shared_bytes(self) -> int:
        return self.bytes - self.exclusive_bytes


@dataclass
class StoreUsage:
    """What a store holds, per object and per evaluation.

    Attributes:
        object_sizes: every object in the store -> its stored bytes.
        total_bytes: every file under ``objects/`` and ``packs/`` (what the disk holds).
        other_bytes: the part of *total_bytes* that is no object (damaged packs,
            stray files).
        evaluations: the evaluations refs name, by id.
        reach_count: object id -> how many of those evaluations reach it.
        pinned: objects reached from roots that are not evaluations (refs in other
            namespaces, evaluations being recorded, metric journals): no removal of
            evaluations frees them.
        missing: objects linked or named but not in the store (``memostore fsck``).
    """

    object_sizes: dict[str, int]
    total_bytes: int
    other_bytes: int
    evaluations: dict[str, EvaluationUsage]
    reach_count: dict[str, int]
    pinned: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()

    @functools.cached_property
    def reachable_bytes(self) -> int:
        """Bytes of the objects some root reaches (what gc keeps)."""
        return self._sum(self.reach_count.keys() | self.pinned)

    @property
    def garbage_bytes(self) -> int:
        """Bytes no root reaches: the next gc frees them (once past its grace period)."""
        return self.total_bytes - self.other_bytes - self.reachable_bytes

    @functools.cached_property
    def _alone_sizes(self) -> dict[str, int]:
        """Object -> size, of the objects one evaluation alone reaches (and nothing pinned)."""
        sizes, pinned = self.object_sizes, self.pinned
        return {
            o: sizes.get(o, 0) for o, n in self.reach_count.items() if n == 1 and o not in pinned
        }

    @functools.cached_property
    def _by_evaluation(self) -> dict[str, tuple[int, int]]:
        """Evaluation id -> (bytes, exclusive bytes), for every evaluation at once."""
        sizes, alone, zeros = self.object_sizes.get, self._alone_sizes.get, itertools.repeat(0)
        # One tight loop (map() keeps the sums in C): du shows both for every evaluation.
        return {
            evaluation_id: (sum(map(sizes, e.objects, zeros)), sum(map(alone, e.objects, zeros)))
            for evaluation_id, e in self.evaluations.items()
        }

    def _sum(self, objects: Iterable[str]) -> int:
        # map() over dict.get keeps the loop in C: du sums tens of thousands of sizes.
        return sum(map(self.object_sizes.get, objects, itertools.repeat(0)))

    def evaluation_bytes(self) -> Mapping[str, tuple[int, int]]:
        """Every evaluation's (bytes, exclusive bytes), computed once (read-only)."""
        return self._by_evaluation

    def bytes_of(self, evaluation_id: str) -> int:
        """Every byte *evaluation_id* reaches."""
        known = self.__dict__.get("_by_evaluation")  # computed already: a lookup
        if known is not None:
            return known[evaluation_id][0]
        return self._sum(self.evaluations[evaluation_id].objects)

    def exclusive_bytes(self, evaluation_id: str) -> int:
        """Bytes freed (by the next gc) if this evaluation alone went."""
        known = self.__dict__.get("_by_evaluation")
        if known is not None:
            return known[evaluation_id][1]
        objects = self.evaluations[evaluation_id].objects
        return sum(map(self._alone_sizes.get, objects, itertools.repeat(0)))

    def shared_bytes(self, evaluation_id: str) -> int:
        """Bytes it reaches that other roots reach too."""
        return self.bytes_of(evaluation_id) - self.exclusive_bytes(evaluation_id)

    def freed_by(self, evaluation_ids: Iterable[str]) -> int:
        """Bytes freed (by the next gc) if all of *evaluation_ids* went together."""
        reached: Counter[str] = Counter()
        for evaluation_id in set(evaluation_ids):
            reached.update(self.evaluations[evaluation_id].objects)
        counts, pinned = self.reach_count, self.pinned
        return self._sum(o for o, n in reached.items() if n == counts[o] and o not in pinned)

    def by_function(self) -> dict[str, FunctionUsage]:
        """Per function: its evaluations, what they reach and what they alone hold."""
        groups: dict[str, list[str]] = {}
        for evaluation in self.evaluations.values():
            groups.setdefault(evaluation.function, []).append(evaluation.id)
        reached: dict[str, set[str]] = {}
        seen: set[str] = set()
        several: set[str] = set(self.pinned)  # reached by more than one function, or pinned
        evaluations = self.evaluations
        for function, ids in groups.items():
            # One union of all the sets (in C), not one per evaluation.
            objects: set[str] = set().union(*(evaluations[e].objects for e in ids))
            several |= seen & objects
            seen |= objects
            reached[function] = objects
        return {
            function: FunctionUsage(
                function,
                groups[function],
                self._sum(reached[function]),
                self._sum(reached[function] - several),
            )
            for function in sorted(groups)
        }


def compute_usage(store: Store, progress: Progress = no_progress) -> StoreUsage:
    """Account for every byte of *store*: per object, per evaluation, in total.

    Reads no object twice across calls (the links cache): on a store whose
    objects were accounted before, it lists the refs and the loose objects,
    reads the pack indexes and the caches, and stats nothing.
    """
    with collector_paused():
        return _compute_usage(store, progress)


def _compute_usage(store: Store, progress: Progress) -> StoreUsage:
    walker = _Walker(store)
    sizes, other = _object_sizes(store, walker)
    eval_refs, other_roots = _roots(store)
    progress("walk", 0, len(eval_refs))
    reached: dict[str, frozenset[str]] = {}
    for done, evaluation_id in enumerate(eval_refs):
        reached[evaluation_id] = walker.closure(evaluation_id)
        if done % 1000 == 0:
            progress("walk", done, len(eval_refs))
    # One count over every closure: Counter.update's own overhead, 10,000 times, costs more.
    reach: Counter[str] = Counter(itertools.chain.from_iterable(reached.values()))
    pinned: set[str] = set()
    for root in other_roots:
        pinned |= walker.closure(root)
    progress("walk", len(eval_refs), len(eval_refs))
    infos = walker.evaluation_infos(eval_refs)
    walker.save()
    evaluations = {}
    for evaluation_id, names in eval_refs.items():
        function, started, status = infos[evaluation_id]
        evaluations[evaluation_id] = EvaluationUsage(
            id=evaluation_id,
            function=function,
            refs=sorted(names),
            started=started if started is not None else 0.0,
            status=status,
            objects=reached[evaluation_id],
        )
    missing = frozenset((reach.keys() | pinned) - sizes.keys())
    return StoreUsage(
        object_sizes=sizes,
        total_bytes=sum(sizes.values()) + other,
        other_bytes=other,
        evaluations=evaluations,
        reach_count=dict(reach),
        pinned=frozenset(pinned),
        missing=missing,
    )


class EvictionPlanner:
    """Removes evaluations from a :class:`StoreUsage` one at a time, in memory only.

    Attributes:
        reached_bytes: bytes still reached from some root after the removals so far.
        freed_bytes: bytes the next gc frees after the removals so far.
    """

    def __init__(self, usage: StoreUsage) -> None:
        self.usage = usage
        self._counts = dict(usage.reach_count)
        self._removed: set[str] = set()
        self.reached_bytes = usage.reachable_bytes
        self.freed_bytes = 0

    def remove(self, evaluation_id: str) -> bool:
        """Remove one evaluation; False (nothing changed) if it is tagged or unknown."""
        evaluation = self.usage.evaluations.get(evaluation_id)
        if evaluation is None or evaluation_id in self._removed or is_tagged(evaluation):
            return False
        self._removed.add(evaluation_id)
        sizes, counts, pinned = self.usage.object_sizes, self._counts, self.usage.pinned
        for object_id in evaluation.objects:
            counts[object_id] -= 1
            if counts[object_id] == 0 and object_id not in pinned:
                freed = sizes.get(object_id, 0)
                self.reached_bytes -= freed
                self.freed_bytes += freed
        return True


def is_tagged(evaluation: EvaluationUsage) -> bool:
    """True when a tag names this evaluation."""
    return any(name.startswith("tags/") for name in evaluation.refs)


# -- roots -------------------------------------------------------------------------------------
def _roots(store: Store) -> tuple[dict[str, list[str]], set[str]]:
    """(evaluation id -> the refs naming it, the other roots gc keeps)."""
    evaluations: dict[str, list[str]] = {}
    others: set[str] = set()
    for name, target in store.refs.iter(""):
        if not is_object_id(target):
            continue
        if name.startswith(EVALUATION_REF_PREFIXES):
            evaluations.setdefault(target, []).append(name)
        else:
            others.add(target)
    pending = getattr(store, "pending_roots", None)
    if pending is not None:
        others.update(r for r in pending() if is_object_id(r))
    others.update(_journal_roots(store))
    # A ref outside those namespaces keeps its target (an evaluation too) whatever rm does.
    return evaluations, others


def _journal_roots(store: Store) -> set[str]:
    """Objects that metric journals in progress stored (gc keeps them: maintenance.py)."""
    if store.root is not None:
        try:
            with os.scandir(store.root / "journal") as entries:
                if next(entries, None) is None:
                    return set()  # no journal: spare the import of the metrics package
        except OSError:
            return set()
    try:
        from ..metrics.recover import journal_roots
    except ImportError:
        return set()
    try:
        return {r for r in journal_roots(store) if isinstance(r, str) and is_object_id(r)}
    except (AttributeError, KeyError, TypeError, ValueError, OSError):
        return set()  # a malformed journal: gc refuses to run; du just cannot count it


# -- the walk ----------------------------------------------------------------------------------
class _Walker:
    """Closures of roots over the links graph, and loose sizes, through the links cache."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: Mapping[str, links_cache.Entry] = links_cache.load(store)
        self.new: dict[str, links_cache.Entry] = {}
        self.documents: set[str] = set()  # read whole and checked (links_cache's mark)
        self.unreadable: set[str] = set()
        self.loose: dict[str, int] = {}  # loose object -> its size, as listed now
        self.closures: dict[str, frozenset[str]] = {}  # root -> what it reaches

    def closure(self, root: str) -> frozenset[str]:
        """Every object *root* reaches, itself included."""
        known, done = self.known, self.closures
        seen = {root}
        stack = [root]
        # Bound methods: the loop runs once per document of 10,000 evaluations.
        pop, push, add, update = stack.pop, stack.append, seen.add, seen.update
        while stack:
            object_id = pop()
            entry = known.get(object_id)
            if entry is None:
                entry = self.entry(object_id)
            docs, blobs = entry[1], entry[2]
            if blobs:
                update(blobs)
            for doc in docs:
                if doc in seen:
                    continue
                below = done.get(doc)
                if below is not None:
                    update(below)  # a parent evaluation walked before: its closure whole
                else:
                    add(doc)
                    push(doc)
        closure = frozenset(seen)
        done[root] = closure
        return closure

    def entry(self, object_id: str) -> links_cache.Entry:
        entry = self.known.get(object_id) or self.new.get(object_id)
        if entry is not None:
            return entry
        if object_id in self.unreadable:
            return -1, (), (), None
        entry = self._read(object_id)
        if entry is None:
            self.unreadable.add(object_id)
            return -1, (), (), None
        self.new[object_id] = entry
        return entry

    def loose_size(self, object_id: str, path: str) -> int | None:
        """The size of a loose object: its entry's, else its file's (None if it is gone)."""
        entry = self.known.get(object_id)
        if entry is not None and entry[0] >= 0:
            size = entry[0]
        else:
            try:
                st = os.lstat(path)
            except OSError:
                return None  # deleted meanwhile (gc)
            if not stat.S_ISREG(st.st_mode):
                return None
            size = st.st_size
            if entry is not None:
                self.new[object_id] = (size, entry[1], entry[2], entry[3])
        self.loose[object_id] = size
        return size

    def _read(self, object_id: str) -> links_cache.Entry | None:
        objects = self.store.objects
        size = self.loose.get(object_id, -1)
        if size < 0 and objects.pack_location(object_id, refresh=False) is not None:
            return -1, (), (), None  # packs hold blobs only
        path = objects.blob_path(object_id)
        if path is not None:
            try:
                with open(path, "rb") as f:
                    if not is_doc_bytes(f.read(16)):
                        return size, (), (), None  # a blob links nothing
            except OSError:
                return None
        try:
            doc = objects.get_doc(object_id)
        except MalformedObject:
            return size, (), (), None  # a blob (memory stores: no header to peek at)
        except (ObjectNotFound, MemostoreError):
            return None  # missing or damaged: what it links is unknown (fsck says)
        self.documents.add(object_id)
        info = _evaluation_info(doc.body) if doc.kind == KIND_EVALUATION else None
        return size, tuple(sorted(doc.links.docs)), tuple(sorted(doc.links.blobs)), info

    def evaluation_infos(self, evaluation_ids: Iterable[str]) -> dict[str, EvaluationInfo]:
        """(function, start time, status) of each evaluation: from the links cache, else
        from the evaluation index (which reads the documents it lacks)."""
        infos: dict[str, EvaluationInfo] = {}
        lacking = []
        for evaluation_id in evaluation_ids:
            entry = self.known.get(evaluation_id) or self.new.get(evaluation_id)
            if entry is not None and entry[3] is not None:
                infos[evaluation_id] = entry[3]
            else:
                lacking.append(evaluation_id)
        if not lacking:
            return infos
        # Entries written before the cache held records, or documents that cannot be read.
        entries, problems = index.lookup(self.store, lacking)
        for evaluation_id in lacking:
            found = entries.get(evaluation_id)
            if found is None:
                status = "unreadable" if evaluation_id in problems else "?"
                infos[evaluation_id] = ("?", None, status)
                continue
            info = _evaluation_info(found)
            infos[evaluation_id] = info
            entry = self.known.get(evaluation_id) or self.new.get(evaluation_id)
            if entry is not None:
                self.new[evaluation_id] = (entry[0], entry[1], entry[2], info)
        return infos

    def save(self) -> None:
        """Append what this walk learnt; first the loose objects it listed but did not
        reach (blobs linked by documents, garbage), so no later walk stats them."""
        if self.store.root is None:
            return
        # A set difference, not a loop: all but a few listed objects are known.
        for object_id in self.loose.keys() - self.known.keys():
            self.entry(object_id)
        if self.new:
            links_cache.append(self.store, self.new.items(), self.documents)
            self.new = {}


def _evaluation_info(record: Mapping[str, Any]) -> EvaluationInfo:
    """(function, start time, status) of an evaluation record or index entry."""
    started = record.get("started")
    when = (
        float(started)
        if isinstance(started, (int, float)) and not isinstance(started, bool)
        else None
    )
    return str(record.get("function") or "?"), when, str(record.get("status") or "?")


# -- sizes -------------------------------------------------------------------------------------
def _object_sizes(store: Store, walker: _Walker) -> tuple[dict[str, int], int]:
    """(object id -> stored bytes, bytes of files that are no object) for *store*."""
    objects: Any = store.objects
    if store.root is None:
        return {i: objects.size_of(i) for i in objects.iter_ids()}, 0
    other = _loose_sizes(str(objects.objects_dir), walker)
    sizes = dict(walker.loose)
    packs = getattr(objects, "packs", None)
    listed: set[str] = set()
    for pack in packs.packs() if packs is not None else ():
        listed.add(os.path.basename(pack.path))
        _add_pack_shares(pack, sizes)
    other += _other_files(str(store.root / "packs"), listed)
    return sizes, other


def _loose_sizes(objects_dir: str, walker: _Walker) -> int:
    """Size every loose object (into *walker*); return the bytes of files that are none."""
    other = 0
    try:
        fans = [e for e in os.scandir(objects_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    # Links are never followed (fsck names them): what lies behind is no part of the store.
    for fan in fans:
        if not _FAN_RE.fullmatch(fan.name):
            other += _other_files(fan.path, set())
            continue
        try:
            names = os.listdir(fan.path)
        except OSError:
            continue
        known, loose, fan_name = walker.known, walker.loose, fan.name
        for name in names:
            object_id = fan_name + name
            entry = known.get(object_id)
            if entry is not None and entry[0] >= 0:
                # What loose_size does, inline: 40,000 calls cost more than the lookup.
                loose[object_id] = entry[0]
            # An id the cache holds was checked when the cache was read.
            elif entry is not None or _REST_RE.fullmatch(name):
                walker.loose_size(object_id, f"{fan.path}/{name}")
            else:
                other += _file_size(f"{fan.path}/{name}")
    return other


def _add_pack_shares(pack: Pack, sizes: dict[str, int]) -> None:
    """Share one pack's bytes among its members: each gets its bytes, the padding
    before them and its index record, the first also the trailer (as the pack
    file adds up). An id in several packs gets its share of each."""
    members = sorted(pack.members.items(), key=lambda item: item[1][0])
    if not members:
        return
    # Layout (packs.py): 48-byte index records, then a 32-byte trailer.
    record, trailer = 48, 32
    index_at = pack.size - trailer - record * len(members)
    previous_end = 0
    shares = []
    for object_id, (offset, length) in members:
        shares.append((object_id, offset + length - previous_end + record))
        previous_end = offset + length
    # Whatever lies between the last member and the index (none in packs this
    # store writes), and the trailer, go to the first member.
    first_id, first_share = shares[0]
    shares[0] = (first_id, first_share + (index_at - previous_end) + trailer)
    for object_id, share in shares:
        sizes[object_id] = sizes.get(object_id, 0) + share


def _other_files(directory: str, listed: set[str]) -> int:
    """Bytes of the regular files in *directory* (not below) but those *listed*."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    return sum(_file_size(f"{directory}/{n}") for n in names if n not in listed)


def _file_size(path: str) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
