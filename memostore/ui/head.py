"""The first page of the runs table, read from the evaluation index without the full listing.

Listing every evaluation reads every ref file and checks every index entry:
about a second for 10,000 evaluations. The table's first page needs only the
newest ones, so it is answered from the index file alone: one JSON parse of
the file, the entries sorted by start time, and, for the newest, one ref read
each to confirm that a ref still names the evaluation (a removed one is
skipped). The full listing (:meth:`.queries.Catalog.runs`) follows and
replaces this page: it also finds what the index lacks (an evaluation whose
entry was lost to a crash is listed there, not here).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb import index, jsonlines
from ..odb.objects import is_object_id
from ..odb.refs import ref_part

if TYPE_CHECKING:
    from ..odb.store import Store

# How many candidates past the page to confirm before giving up on the rest: a
# store whose newest evaluations were mostly removed answers with a short page.
_SPARE_CHECKS = 200
_INDEX_READ_MAX = 1 << 30


def _shaped(entry: Any) -> bool:
    """Whether an entry has the fields a table row reads, of the types a record gives them."""
    if not (
        isinstance(entry, dict)
        and entry.get("v") == index.ENTRY_VERSION
        and is_object_id(entry.get("id"))
        and isinstance(entry.get("function"), str)
        and isinstance(entry.get("started"), (int, float))
    ):
        return False
    for name, kind in (("hparams", dict), ("args_summary", dict), ("parents", list)):
        value = entry.get(name)
        if value is not None and not isinstance(value, kind):
            return False
    summary = entry.get("args_summary") or {}
    return all(isinstance(v, str) for v in summary.values()) and all(
        isinstance(p, str) for p in entry.get("parents") or []
    )


def _ref_names(entry: Mapping[str, Any]) -> Iterator[str]:
    """The refs that would name this evaluation (a call's success or failure, or a run)."""
    function, key = entry["function"], entry.get("key")
    if isinstance(key, str):
        yield f"evals/{ref_part(function)}/{key}"
        yield f"failed/{ref_part(function)}/{key}"
    else:
        yield f"runs/{ref_part(function.split(':', 1)[-1])}/{entry['id']}"


def newest_from_index(store: Store, limit: int) -> dict[str, Any] | None:
    """The newest *limit* evaluations the index lists that a ref still names.

    Args:
        store: the store.
        limit: how many entries to return.

    Returns:
        None when the store has no readable index (the caller lists fully);
        else ``{"entries", "indexed", "functions", "statuses"}``: entries newest
        first, each with its ``refs``; ``indexed`` counts the distinct
        evaluations of the index (removed ones too, until gc rewrites it);
        ``functions`` and ``statuses`` are those of every indexed entry.
    """
    path = index.index_path(store)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read(_INDEX_READ_MAX)
    except OSError:
        return None
    by_id: dict[str, dict[str, Any]] = {}
    for entry in jsonlines.parse(data):
        if _shaped(entry):
            by_id[entry["id"]] = entry
    if not by_id:
        return None
    ordered = sorted(by_id.values(), key=lambda e: -float(e["started"]))
    found: list[dict[str, Any]] = []
    for checked, entry in enumerate(ordered):
        if len(found) >= limit or checked >= limit + _SPARE_CHECKS:
            break
        refs = [name for name in _ref_names(entry) if _names(store, name, entry["id"])]
        if refs:
            found.append({**entry, "refs": refs})
    return {
        "entries": found,
        "indexed": len(by_id),
        "functions": sorted({e["function"] for e in by_id.values()}),
        "statuses": sorted({str(e.get("status")) for e in by_id.values() if e.get("status")}),
    }


def _names(store: Store, ref: str, evaluation_id: str) -> bool:
    try:
        return store.refs.read(ref) == evaluation_id
    except (OSError, MemostoreError):
        return False  # a damaged ref names nothing here; the full listing reports it
