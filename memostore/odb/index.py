"""The evaluation index: a cache of the few fields that listings need.

``memostore log`` on a store with many evaluations would otherwise read every
evaluation document. The index is an append-only file, ``index/evaluations``,
with one JSON line per evaluation: its id and the fields of its record that
listings show (function, status, start time, duration, arguments summary,
parents). An evaluation document never changes (its id names its content), so
an entry can never go stale; it can only be missing, and a missing entry is
rebuilt from the document on the next listing. The refs, not the index, say
which evaluations exist.

Concurrency: every append is a single ``write`` on a file opened with
``O_APPEND``, so lines from concurrent writers do not interleave. A line torn by
a crash fails to parse and is skipped (its entry is rebuilt later). ``gc`` and
``fsck`` rewrite the file through a temp file and an atomic rename; an append
that races with the rename may be lost, which costs a document read later,
never a wrong answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from . import jsonlines
from .fsutil import write_atomically
from .objects import is_object_id

if TYPE_CHECKING:
    from .store import Store

INDEX_DIRNAME = "index"
INDEX_FILENAME = "evaluations"
ENTRY_VERSION = 1

# index path -> ((inode, size, mtime), parsed entries): see load().
_loaded: dict[Path, tuple[tuple[int, int, int], dict[str, dict[str, Any]]]] = {}

# Record fields copied into an entry. Everything else stays in the document.
_FIELDS = (
    "function",
    "key",
    "status",
    "started",
    "duration_s",
    "parents",
    "hparams",
    "args_summary",
    "result_summary",
    "logs",
    "run_name",
)


def index_path(store: Store) -> Path | None:
    """Where the index of *store* lives; None for an in-memory store."""
    if store.root is None:
        return None
    return store.root / INDEX_DIRNAME / INDEX_FILENAME


def entry_from_body(evaluation_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The index entry of one evaluation, from its record.

    A ``started`` later than now is entered as now: a record pulled from a
    remote says whatever its writer wrote, and one dated in the future must
    not rank as the newest evaluation of its function in every listing (``log``,
    ``show FUNCTION``, the dashboard) from then on. Any record that is true
    started before it was entered here.
    """
    entry: dict[str, Any] = {"v": ENTRY_VERSION, "id": evaluation_id}
    for name in _FIELDS:
        entry[name] = body.get(name)
    started = entry["started"]
    if isinstance(started, (int, float)) and not started <= (now := time.time()):
        entry["started"] = now
    error = body.get("error")
    entry["error"] = error.get("type") if isinstance(error, Mapping) else None
    return entry


def record(store: Store, evaluation_id: str, body: Mapping[str, Any]) -> None:
    """Add one evaluation to the index (call right after publishing its ref).

    Never raises: the index is a cache, and failing to extend it must not fail
    the call that recorded the evaluation.
    """
    with contextlib.suppress(OSError, ValueError, TypeError):
        _append(store, [entry_from_body(evaluation_id, body)])


def load(store: Store) -> Mapping[str, dict[str, Any]]:
    """Every well-formed entry of the index, by evaluation id (read-only: it is shared).

    The parsed file is kept per process while the file is unchanged (same inode,
    size and modification time), so one command reading it twice parses it once.
    """
    path = index_path(store)
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = _loaded.get(path)
            if cached is not None and cached[0] == signature:
                return cached[1]
            data = f.read()
    except OSError:
        # Missing, or not a readable file (a directory, no permission): the index is
        # a cache, and fsck rebuilds it.
        return {}
    entries = _parse(data)
    _loaded[path] = (signature, entries)
    return entries


def _parse(data: bytes) -> dict[str, dict[str, Any]]:
    parsed = jsonlines.parse(data)  # a line torn by a crash: its entry is rebuilt on demand
    entries: dict[str, dict[str, Any]] = {}
    for entry in parsed:
        if _well_formed(entry):
            entries[entry["id"]] = entry
    return entries


def lookup(
    store: Store,
    evaluation_ids: Iterable[str],
    entries: Mapping[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Entries for *evaluation_ids*, reading (and indexing) the documents the index lacks.

    Args:
        store: the store.
        evaluation_ids: the evaluations wanted.
        entries: the loaded index, when the caller has it already.

    Returns:
        (entries by id, problems by id) where a problem says why an evaluation
        document could not be read (missing or damaged).
    """
    known = load(store) if entries is None else entries
    added: dict[str, dict[str, Any]] = {}
    found: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    new: list[dict[str, Any]] = []
    for evaluation_id in evaluation_ids:
        entry = known.get(evaluation_id) or added.get(evaluation_id)
        if entry is None:
            try:
                body = store.evaluation(evaluation_id).body
            except MemostoreError as exc:
                problems[evaluation_id] = str(exc)
                continue
            entry = entry_from_body(evaluation_id, body)
            added[evaluation_id] = entry
            new.append(entry)
        found[evaluation_id] = entry
    if new:
        with contextlib.suppress(OSError):
            _append(store, new)
    return found, problems


def rewrite(store: Store, entries: Iterable[Mapping[str, Any]]) -> int:
    """Replace the index with *entries* (atomically); return how many were written."""
    path = index_path(store)
    if path is None:
        return 0
    lines = [_line(entry) for entry in entries]
    write_atomically(path, b"".join(lines))
    count = len(lines)
    return count


def _append(store: Store, entries: list[dict[str, Any]]) -> None:
    path = index_path(store)
    if path is None:
        return
    jsonlines.append(path, b"".join(_line(e) for e in entries))


def _line(entry: Mapping[str, Any]) -> bytes:
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
    return text.encode("utf-8") + b"\n"


def _well_formed(entry: Any) -> bool:
    # Every field listings read has the type a record gives it: an entry is found by
    # the id a ref holds, and a line of another shape (damage, or written by something
    # else) must read as missing (rebuilt from the document), never break a listing.
    if not (
        isinstance(entry, dict)
        and entry.get("v") == ENTRY_VERSION
        and is_object_id(entry.get("id"))
        and isinstance(entry.get("function"), str)
    ):
        return False
    for name, types in _FIELD_TYPES.items():
        value = entry.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            return False
    parents, args = entry.get("parents"), entry.get("args_summary")
    return (parents is None or all(isinstance(p, str) for p in parents)) and (
        args is None or all(isinstance(v, str) for v in args.values())
    )


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "key": str,
    "status": str,
    "started": (int, float),
    "duration_s": (int, float),
    "parents": list,
    "hparams": dict,
    "args_summary": dict,
    "result_summary": str,
    "logs": str,
    "run_name": str,
    "error": str,
}


# -- listing fields -------------------------------------------------------------------------


def iso_time(timestamp: Any) -> str | None:
    """A UNIX time as ISO 8601 in UTC (fixed width, so the strings sort as the times)."""
    if not isinstance(timestamp, (int, float)):
        return None
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.isoformat(timespec="microseconds")
