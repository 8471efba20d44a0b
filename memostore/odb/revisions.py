"""Revisions: how a user names an evaluation on the command line.

A revision (REV) is one of:

* a full evaluation id (64 hex digits);
* a unique prefix of an evaluation id, at least 4 hex digits;
* a function name: its newest evaluation. ``module:qualname`` as recorded,
  ``module.qualname``, the bare ``qualname`` or its last component (``train``),
  or a script name for standalone runs (``train.py``);
* a tag name (``memostore tag``): the evaluation it names;
* any of these followed by ``~N``: the N-th older evaluation of the same function.

An id prefix wins over a tag, and a tag over a function (tag names are never
hex digits alone, so the first never hides a tag).
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import RevisionNotFound
from . import index
from .objects import DOC_PREFIX, KIND_EVALUATION, is_object_id
from .refs import ref_part
from .tags import resolve_tag

if TYPE_CHECKING:
    from .store import Store

MIN_PREFIX = 4
_HEXDIGITS = frozenset("0123456789abcdef")
_EVALUATION_HEADER = DOC_PREFIX + KIND_EVALUATION.encode("ascii") + b":"
_HOW_TO_NAME = (
    "name an evaluation by its id, a unique prefix of at least 4 hex digits, "
    "a function name (see `memostore log`) or a tag name (see `memostore tag`)"
)


class AmbiguousRevision(RevisionNotFound):
    """A revision matches more than one evaluation or function.

    Attributes:
        candidates: (id or function, description) for each match.
    """

    def __init__(self, rev: str, candidates: list[tuple[str, str]]) -> None:
        self.candidates = candidates
        listed = "; ".join(f"{name} {what}".strip() for name, what in candidates[:10])
        more = f"; and {len(candidates) - 10} more" if len(candidates) > 10 else ""
        super().__init__(
            f"revision {rev!r} is ambiguous: it matches {listed}{more}; give more of it"
        )


def function_ref_prefixes(function: str) -> list[str]:
    """The ref-name prefixes under which *function*'s evaluations are published."""
    prefixes = [f"evals/{ref_part(function)}/", f"failed/{ref_part(function)}/"]
    if function.startswith("run:"):
        prefixes.append(f"runs/{ref_part(function.split(':', 1)[1])}/")
    return prefixes


def listed_evaluations(
    store: Store,
    entries: Mapping[str, dict[str, Any]] | None = None,
    functions: Iterable[str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Evaluations refs name, newest first, as index entries with their refs.

    Args:
        store: the store.
        entries: the loaded index, when the caller has it already.
        functions: only these functions' refs (reading only their directories).

    Returns:
        (entries, problems): each entry is a copy of the index entry with a
        ``refs`` list; problems maps ids whose document could not be read to why.
    """
    if functions is None:
        refs: Iterable[tuple[str, str]] = store.iter_evaluation_refs()
    else:
        wanted = set(functions)
        prefixes = sorted({p for f in wanted for p in function_ref_prefixes(f)})
        refs = (item for prefix in prefixes for item in store.refs.iter(prefix))
    ref_names: dict[str, list[str]] = {}
    for name, evaluation_id in refs:
        ref_names.setdefault(evaluation_id, []).append(name)
    found, problems = index.lookup(store, ref_names, entries)
    listed = [{**entry, "refs": sorted(ref_names[eid])} for eid, entry in found.items()]
    if functions is not None:
        # A script's runs share a directory name with nothing else, but an escaped
        # function name could be a prefix of another's: keep exact matches only.
        listed = [e for e in listed if e["function"] in wanted]
    listed.sort(key=_newest_first)
    return listed, problems


def find_function(
    store: Store, query: str
) -> tuple[str | None, list[dict[str, Any]], dict[str, str]]:
    """The one recorded function *query* names, with its evaluations (newest first).

    Function names come from the index first (cheap); only when it knows no
    match are all refs listed (which also completes the index).

    Returns:
        (function or None, its evaluations as :func:`listed_evaluations` gives
        them, problems).

    Raises:
        AmbiguousRevision: *query* names several functions that have evaluations.
    """
    entries = index.load(store)
    found: dict[str, tuple[list[dict[str, Any]], dict[str, str]]] = {}
    for function in function_matches({e["function"] for e in entries.values()}, query):
        listed, problems = listed_evaluations(store, entries, [function])
        # The index may remember functions whose refs are all gone: skip those.
        if listed or problems:
            found[function] = (listed, problems)
    if not found:
        listed, problems = listed_evaluations(store, entries)
        for function in function_matches({e["function"] for e in listed}, query):
            found[function] = ([e for e in listed if e["function"] == function], problems)
    if len(found) > 1:
        raise AmbiguousRevision(query, [(f, "(function)") for f in sorted(found)])
    for function, (listed, problems) in found.items():
        return function, listed, problems
    return None, [], {}


def did_you_mean(store: Store, query: str) -> str:
    """``"; did you mean 'train'?"`` for the recorded function names close to *query*, or ""."""
    names: set[str] = set()
    for entry in index.load(store).values():
        module, _, qualname = entry["function"].partition(":")
        if qualname and module != "run":
            names.add(qualname.rpartition(".")[2])  # a method or a local function: its name
    close = difflib.get_close_matches(query, sorted(names), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""


def _newest_first(entry: dict[str, Any]) -> tuple[float, str]:
    started = entry.get("started")
    return (-(started if isinstance(started, (int, float)) else 0.0), entry["id"])


def function_matches(functions: Iterable[str], query: str) -> list[str]:
    """The recorded function symbols *query* names, best match tier only."""
    names = sorted(set(functions))
    exact = [f for f in names if f == query]
    if exact:
        return exact
    tiers: list[list[str]] = [[], [], []]
    for function in names:
        module, _, qualname = function.partition(":")
        if not qualname:
            continue
        if query in (qualname, f"{module}.{qualname}"):
            tiers[0].append(function)
        elif module == "run" and query in (qualname, qualname.rsplit(".", 1)[0]):
            tiers[1].append(function)
        elif qualname.endswith("." + query):
            tiers[2].append(function)
    for tier in tiers:
        if tier:
            return tier
    return []


def resolve_revision(store: Store, rev: str) -> str:
    """The evaluation id *rev* names.

    Raises:
        RevisionNotFound: nothing matches (the message says how to name one).
        AmbiguousRevision: several evaluations or functions match; lists them.
    """
    rev = rev.strip()
    base, older = _split_older(rev)
    evaluation_id = _resolve_base(store, base, rev)
    if older == 0:
        return evaluation_id
    return _older_of(store, evaluation_id, older, rev)


def _split_older(rev: str) -> tuple[str, int]:
    base, sep, count = rev.rpartition("~")
    if not sep:
        return rev, 0
    if count == "":
        return base, 1
    if not count.isdigit():
        raise RevisionNotFound(
            f"bad revision {rev!r}: ~ must be followed by a number; " + _HOW_TO_NAME
        )
    return base, int(count)


def _resolve_base(store: Store, base: str, rev: str) -> str:
    if not base:
        raise RevisionNotFound(f"empty revision {rev!r}; " + _HOW_TO_NAME)
    lowered = base.lower()
    if len(lowered) >= MIN_PREFIX and set(lowered) <= _HEXDIGITS:
        matches = _evaluations_with_prefix(store, lowered)
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise AmbiguousRevision(rev, _describe_ids(store, matches))
        if is_object_id(lowered):
            raise RevisionNotFound(f"no evaluation {lowered} in this store; " + _HOW_TO_NAME)
    tagged = resolve_tag(store, base)  # one ref read
    if tagged is not None:
        return tagged
    _, listed, _ = find_function(store, base)
    if listed:
        return listed[0]["id"]  # newest first
    raise RevisionNotFound(f"unknown revision {rev!r}{did_you_mean(store, base)}; " + _HOW_TO_NAME)


def _older_of(store: Store, evaluation_id: str, older: int, rev: str) -> str:
    function = store.evaluation(evaluation_id).body.get("function")
    listed, _ = listed_evaluations(store, functions=[function])
    ids = [e["id"] for e in listed]
    position = ids.index(evaluation_id) if evaluation_id in ids else -1
    if position < 0 or position + older >= len(ids):
        raise RevisionNotFound(
            f"{rev!r}: {function} has only {len(ids)} evaluation(s); "
            "see them with `memostore log FUNCTION`"
        )
    return ids[position + older]


def _evaluations_with_prefix(store: Store, prefix: str) -> list[str]:
    """Ids of evaluation documents in the object database that start with *prefix*."""
    return sorted(i for i in _ids_with_prefix(store, prefix) if _is_evaluation(store, i))


def _ids_with_prefix(store: Store, prefix: str) -> list[str]:
    objects = store.objects
    fan_dir = getattr(objects, "objects_dir", None)
    if fan_dir is not None:
        # A loose-object store fans out on the first two digits: list one directory.
        directory = fan_dir / prefix[:2]
        try:
            names = [n for n in os.listdir(directory) if n.startswith(prefix[2:])]
        except FileNotFoundError:
            names = []
        return [prefix[:2] + n for n in names if is_object_id(prefix[:2] + n)]
    return [i for i in objects.iter_ids() if i.startswith(prefix)]


def _is_evaluation(store: Store, object_id: str) -> bool:
    path = store.objects.blob_path(object_id)
    if path is not None:
        # Only the header is needed to tell the kind; the digest is checked when
        # the chosen evaluation is read.
        try:
            with open(path, "rb") as f:
                return f.read(len(_EVALUATION_HEADER)) == _EVALUATION_HEADER
        except OSError:
            return False
    with contextlib.suppress(Exception):
        return store.objects.get_doc(object_id).kind == KIND_EVALUATION
    return False


def _describe_ids(store: Store, ids: list[str]) -> list[tuple[str, str]]:
    entries, _ = index.lookup(store, ids)
    out = []
    for evaluation_id in ids:
        entry = entries.get(evaluation_id)
        out.append((evaluation_id[:12], f"({entry['function']})" if entry else "(unreadable)"))
    return out
