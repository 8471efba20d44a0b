"""``fsck``: find damage in a store, changing nothing but caches.

Every object is read and hashed (blobs streamed), every document parsed, and
the object graph followed through each document's ``links`` from every ref,
so fsck needs to understand no kind of document. It never takes a fact from
the links cache (``lifecycle/links_cache.py``): it is what finds the damage a
cache could only repeat.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError, ObjectNotFound
from . import index
from .inside import links_in
from .objects import Doc, is_doc_bytes, new_hasher

if TYPE_CHECKING:
    from .store import Store

_READ_CHUNK = 8 << 20
# Reading a document this large whole is fine; larger objects are streamed.
_DOC_READ_MAX = 64 << 20

# progress(phase, done, total): called as work advances; total may be None.
Progress = Callable[[str, int, "int | None"], None]


def no_progress(phase: str, done: int, total: int | None) -> None:
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


def fsck(store: Store, progress: Progress = no_progress, rebuild_index: bool = True) -> FsckReport:
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
