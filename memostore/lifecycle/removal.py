"""Removing evaluations: deleting the refs that name them; the next gc frees their objects.

Only refs go: objects are freed by gc, which keeps whatever another ref still
reaches (a later evaluation that took this one's result as an argument keeps
it, as its parent). A tagged evaluation is never removed: the tag must be
deleted first (``memostore tag -d``).

Concurrency: each ref is deleted by compare-and-swap (only if it still names
the evaluation being removed), so a ref that a concurrent call has just
pointed at a new evaluation stays. A tag set while removal runs keeps the
evaluation's objects all the same (a tag is a ref gc keeps).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb.objects import is_object_id
from ..odb.tags import list_tags
from .usage import compute_usage

if TYPE_CHECKING:
    from ..odb.store import Store

# The ref namespaces whose refs name evaluations and that removal deletes (never tags/).
REMOVABLE_PREFIXES = ("evals/", "failed/", "runs/", "rng/")


class TaggedEvaluation(MemostoreError):
    """An evaluation asked to be removed is tagged.

    Attributes:
        tags: evaluation id -> the names of the tags naming it.
    """

    def __init__(self, tags: dict[str, list[str]]) -> None:
        self.tags = tags
        shown = "; ".join(f"{eid[:12]} is tagged {', '.join(names)}" for eid, names in tags.items())
        first = next(iter(tags.values()))[0]
        super().__init__(
            f"refusing to remove tagged evaluations ({shown}); nothing was removed: "
            f"delete the tag first (`memostore tag -d {first}`), then run rm again"
        )


@dataclass
class RemovalReport:
    """What removal deleted (or, with dry_run, would delete).

    Attributes:
        dry_run: nothing was changed.
        evaluations: the evaluations removed.
        refs: the refs deleted.
        kept_refs: refs that named one of them but changed meanwhile (left alone).
        freed_bytes: bytes the next gc frees because of this removal (computed before).
        garbage_bytes: bytes the next gc frees anyway (already unreachable before).
    """

    dry_run: bool = False
    evaluations: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    kept_refs: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    garbage_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def refs_naming(store: Store, evaluation_ids: Iterable[str]) -> dict[str, list[str]]:
    """The removable refs (evals/, failed/, runs/, rng/) naming each of *evaluation_ids*.

    Every id asked for is a key, with an empty list when no such ref names it.
    """
    wanted: dict[str, list[str]] = {eid: [] for eid in evaluation_ids}
    for prefix in REMOVABLE_PREFIXES:
        for name, target in store.refs.iter(prefix):
            if target in wanted:
                wanted[target].append(name)
    for names in wanted.values():
        names.sort()
    return wanted


def remove_evaluations(
    store: Store, evaluation_ids: Iterable[str], *, dry_run: bool = False
) -> RemovalReport:
    """Delete every removable ref naming *evaluation_ids*; their objects go at the next gc.

    Raises:
        TaggedEvaluation: one of them is tagged (nothing is removed; the message
            names `memostore tag -d`).
        MemostoreError: an id is not a well-formed object id, or no ref names it.
    """
    ids = list(dict.fromkeys(evaluation_ids))
    for evaluation_id in ids:
        if not is_object_id(evaluation_id):
            raise MemostoreError(f"not an evaluation id: {evaluation_id!r}")
    tags: dict[str, list[str]] = {}
    for name, target in list_tags(store).items():
        if target in ids:
            tags.setdefault(target, []).append(name)
    if tags:
        raise TaggedEvaluation(tags)
    named = refs_naming(store, ids)
    unnamed = [eid for eid, names in named.items() if not names]
    if unnamed:
        raise MemostoreError(
            f"no ref names evaluation {unnamed[0][:12]} (removed already?); "
            "see what the store holds with `memostore log`"
        )
    usage = compute_usage(store)
    report = RemovalReport(
        dry_run=dry_run,
        evaluations=ids,
        freed_bytes=usage.freed_by(e for e in ids if e in usage.evaluations),
        garbage_bytes=usage.garbage_bytes,
    )
    for evaluation_id in ids:
        for name in named[evaluation_id]:
            if dry_run or store.refs.delete_if_equals(name, evaluation_id):
                report.refs.append(name)
            else:
                report.kept_refs.append(name)
    return report
