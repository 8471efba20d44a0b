"""What ``memostore diff REV_A REV_B`` displays, and the one-line reason of a miss.

Everything is compared from the stored documents: evaluation records, code
documents (dependency closures with sources), value nodes and tensor blobs read
as numbers (:mod:`memostore.inspect.node_diff`). No value is decoded, so no code from
the store runs. ``memostore diff REV`` (would the same call hit today?) is
:mod:`memostore.inspect.miss_check`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError, ObjectNotFound
from ..odb.objects import KIND_CODE
from .inspection import metrics_of
from .node_diff import MAX_STEPS, NodeDiffer, ValueDiff, argument_nodes

if TYPE_CHECKING:
    from ..odb.objects import Doc
    from ..odb.store import Store

DIFF_CONTEXT = 3
_METRIC_DELTAS = ("last", "min")
# Paths a one-line miss reason names before it says "and N more".
_REASON_PATHS = 4


# -- code ---------------------------------------------------------------------------------
def recorded_deps(store: Store, code_id: str | None) -> dict[str, dict[str, Any]]:
    """The dependencies in a code document: {symbol: {kind, digest, source}}."""
    if not code_id:
        return {}
    return deps_of(store.objects.get_doc(code_id))


def deps_of(doc: Doc) -> dict[str, dict[str, Any]]:
    """The dependencies listed in code document *doc*, by symbol."""
    if doc.kind != KIND_CODE:
        raise MemostoreError(f"object {doc.id} is a {doc.kind}, not code")
    return {d["symbol"]: d for d in doc.body.get("deps") or [] if isinstance(d, dict)}


def unified_source_diff(symbol: str, before: str | None, after: str | None) -> str:
    """A unified diff of one dependency's source (``a/SYMBOL`` -> ``b/SYMBOL``)."""
    if before is None and after is None:
        return ""
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        (after or "").splitlines(keepends=True),
        fromfile=f"a/{symbol}",
        tofile=f"b/{symbol}",
        n=DIFF_CONTEXT,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def code_changes(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Dependencies changed (with a source diff), added and removed between two closures."""
    changed, added, removed = [], [], []
    for symbol in sorted(set(before) | set(after)):
        old, new = before.get(symbol), after.get(symbol)
        if old is None and new is not None:
            added.append({"symbol": symbol, "kind": new.get("kind"), "digest": new.get("digest")})
        elif new is None and old is not None:
            removed.append({"symbol": symbol, "kind": old.get("kind"), "digest": old.get("digest")})
        elif old is not None and new is not None and old.get("digest") != new.get("digest"):
            changed.append(
                {
                    "symbol": symbol,
                    "kind": new.get("kind"),
                    "a": old.get("digest"),
                    "b": new.get("digest"),
                    "diff": unified_source_diff(symbol, old.get("source"), new.get("source")),
                }
            )
    return {"changed": changed, "added": added, "removed": removed}


# -- values ------------------------------------------------------------------------------
def _value_change(differ: NodeDiffer, found: ValueDiff, a: Any, b: Any) -> dict[str, Any]:
    return {
        "change": "changed",
        "a": differ.summarize(a),
        "b": differ.summarize(b),
        "class": found.root_class,
        "fields": found.changes,
        "more": found.more,
        "stopped": found.stopped,
    }


def argument_changes(
    differ: NodeDiffer, args_a: str | None, args_b: str | None
) -> dict[str, dict[str, Any]]:
    """{name: change} for each argument whose stored value differs.

    A change is ``{"change", "a", "b", "class", "fields", "more"}``: ``a``/``b``
    summarise the whole value, ``fields`` lists each difference inside it (see
    :class:`~memostore.inspect.node_diff.ValueDiff`); added and removed arguments have
    only ``change``, ``a`` and ``b``.
    """
    if args_a == args_b:
        return {}
    nodes_a, labels_a = argument_nodes(differ, args_a)
    nodes_b, labels_b = argument_nodes(differ, args_b)
    changes: dict[str, dict[str, Any]] = {}
    for name in list(nodes_a) + [n for n in nodes_b if n not in nodes_a]:
        in_a, in_b = name in nodes_a, name in nodes_b
        if not (in_a and in_b):
            changes[name] = {
                "change": "removed" if in_a else "added",
                "a": differ.summarize(nodes_a[name]) if in_a else None,
                "b": differ.summarize(nodes_b[name]) if in_b else None,
            }
            continue
        found = differ.diff(nodes_a[name], labels_a, nodes_b[name], labels_b)
        if found.changes or found.stopped:
            changes[name] = _value_change(differ, found, nodes_a[name], nodes_b[name])
    return changes


def effect_changes(
    differ: NodeDiffer, effects_a: Mapping[str, str] | None, effects_b: Mapping[str, str] | None
) -> dict[str, dict[str, Any]]:
    """{name: change} for the post-call states of mutated arguments (and data globals).

    A name mutated on one side only is ``added`` or ``removed``; one mutated on
    both sides into different states is ``changed``, with its ``fields`` as for
    arguments.
    """
    effects_a, effects_b = dict(effects_a or {}), dict(effects_b or {})
    changes: dict[str, dict[str, Any]] = {}
    for name in list(effects_a) + [n for n in effects_b if n not in effects_a]:
        id_a, id_b = effects_a.get(name), effects_b.get(name)
        if id_a == id_b:
            continue
        if id_a is None or id_b is None:
            changes[name] = {
                "change": "added" if id_a is None else "removed",
                "a": _doc_summary(differ, id_a),
                "b": _doc_summary(differ, id_b),
            }
            continue
        try:
            node_a, _ = differ.doc_node(id_a)
            node_b, _ = differ.doc_node(id_b)
            found = differ.diff_docs(id_a, id_b)
        except MemostoreError as exc:
            changes[name] = {"change": "changed", "a": None, "b": None, "error": str(exc)}
            continue
        if found.changes or found.stopped:
            changes[name] = _value_change(differ, found, node_a, node_b)
    return changes


def _doc_summary(differ: NodeDiffer, doc_id: str | None) -> Any:
    if doc_id is None:
        return None
    try:
        return differ.summarize(differ.doc_node(doc_id)[0])
    except MemostoreError as exc:
        return {"type": "unreadable", "id": doc_id, "error": str(exc)}


def rng_changes(
    rng_a: Mapping[str, Any] | None, rng_b: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """{name: {"a", "b", "before_same", "after_same", "seeded"}} for RNGs recorded differently.

    ``seeded`` is whether either call had seeded the RNG (None when neither
    record says): two runs from different start states of an RNG seeded in
    neither are interchangeable answers to an unseeded call.
    """
    rng_a, rng_b = dict(rng_a or {}), dict(rng_b or {})
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(rng_a) | set(rng_b)):
        a, b = rng_a.get(name), rng_b.get(name)
        if a == b:
            continue
        a_map = a if isinstance(a, Mapping) else {}
        b_map = b if isinstance(b, Mapping) else {}
        flags = [m.get("seeded") for m in (a_map, b_map) if isinstance(m.get("seeded"), bool)]
        out[name] = {
            "a": a,
            "b": b,
            "before_same": a_map.get("before") == b_map.get("before") and a is not None,
            "after_same": a_map.get("after") == b_map.get("after") and a is not None,
            "seeded": any(flags) if flags else None,
        }
    return out


def result_changes(differ: NodeDiffer, id_a: str | None, id_b: str | None) -> dict[str, Any]:
    """How two results differ: ``tensors`` (max abs difference each) and other ``values``."""
    if id_a == id_b:
        return {"same": id_a is not None, "a": id_a, "b": id_b}
    out: dict[str, Any] = {"same": False, "a": id_a, "b": id_b}
    if id_a is None or id_b is None:
        out["summary"] = {"a": _doc_summary(differ, id_a), "b": _doc_summary(differ, id_b)}
        return out
    try:
        found = differ.diff_docs(id_a, id_b)
    except MemostoreError as exc:
        out["error"] = f"cannot read both results: {exc}"
        out["summary"] = {"a": _doc_summary(differ, id_a), "b": _doc_summary(differ, id_b)}
        return out
    tensors, values = [], []
    for change in found.changes:
        path = change["path"] or "<result>"
        if "tensor" in change:
            tensors.append({"path": path, **change["tensor"]})
        else:
            values.append({**change, "path": path})
    out.update(tensors=tensors, values=values, more=found.more, stopped=found.stopped)
    # Different encodings can hold equal values (a view stored against a copy).
    out["same"] = not found.changes and not found.stopped
    return out


# -- metrics ----------------------------------------------------------------------------------
def metric_changes(store: Store, logs_a: str | None, logs_b: str | None) -> dict[str, Any]:
    """{tag: {"a": {last, min}, "b": {...}, "delta_last", "delta_min"}} for every tag."""
    metrics_a, _ = metrics_of(store, logs_a)
    metrics_b, _ = metrics_of(store, logs_b)
    out: dict[str, Any] = {}
    for tag in sorted(set(metrics_a) | set(metrics_b)):
        a, b = metrics_a.get(tag) or {}, metrics_b.get(tag) or {}
        entry: dict[str, Any] = {
            "a": {s: a.get(s) for s in _METRIC_DELTAS} if a else None,
            "b": {s: b.get(s) for s in _METRIC_DELTAS} if b else None,
        }
        for stat in _METRIC_DELTAS:
            x, y = a.get(stat), b.get(stat)
            both = isinstance(x, (int, float)) and isinstance(y, (int, float))
            entry[f"delta_{stat}"] = y - x if both else None
        out[tag] = entry
    return out


def diff_records(store: Store, id_a: str, id_b: str) -> dict[str, Any]:
    """Everything ``memostore diff A B`` displays (read from the store, nothing decoded)."""
    body_a = store.evaluation(id_a).body
    body_b = store.evaluation(id_b).body
    deps_a = recorded_deps(store, body_a.get("code"))
    deps_b = recorded_deps(store, body_b.get("code"))
    code = {
        "a": body_a.get("code_digest"),
        "b": body_b.get("code_digest"),
        "same": body_a.get("code_digest") == body_b.get("code_digest"),
        **code_changes(deps_a, deps_b),
    }
    differ = NodeDiffer(store.objects)
    record: dict[str, Any] = {
        "a": {"id": id_a, "function": body_a.get("function"), "status": body_a.get("status")},
        "b": {"id": id_b, "function": body_b.get("function"), "status": body_b.get("status")},
        "args": argument_changes(differ, body_a.get("args"), body_b.get("args")),
        "effects": effect_changes(differ, body_a.get("effects"), body_b.get("effects")),
        "rng": rng_changes(body_a.get("rng"), body_b.get("rng")),
        "code": code,
        "result": result_changes(differ, body_a.get("result"), body_b.get("result")),
        "metrics": metric_changes(store, body_a.get("logs"), body_b.get("logs")),
    }
    if body_a.get("version") != body_b.get("version"):
        record["version"] = {"a": body_a.get("version"), "b": body_b.get("version")}
    return record


# -- why did this call miss? ---------------------------------------------------------------------
def change_paths(changes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where arguments differ, as ``name`` or ``name.path`` (``model.fc1.training``)."""
    paths: list[str] = []
    for name, change in changes.items():
        fields = change.get("fields") or []
        inner = [f["path"] for f in fields if f.get("path")]
        if not inner:
            paths.append(name)
        else:
            paths += [name + p for p in inner]
            if change.get("more") or change.get("stopped"):
                paths.append(f"{name}…")
    return paths


def _short_symbol(symbol: str) -> str:
    return symbol.partition(":")[2] or symbol


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_REASON_PATHS])
    more = len(names) - _REASON_PATHS
    return f"{shown} and {more} more" if more > 0 else shown


def tensor_value_changes(
    store: Store,
    function: str,
    args_id: str,
    code_digest: str,
    docs: Mapping[str, Doc] | None = None,
) -> list[str]:
    """Where the call's arguments differ from the newest stored call's, if only in tensor values.

    Empty unless that call has the same code and every difference is the values
    of a tensor of the same shape and dtype (a model's weights, made anew in
    each process from an unseeded RNG, say). Cheap as :func:`miss_reason`.
    """
    newest = _newest_evaluation(store, function)
    if newest is None:
        return []
    body = store.evaluation(newest).body
    if body.get("code_digest") != code_digest or body.get("args") == args_id:
        return []
    differ = NodeDiffer(store.objects, docs=docs, numeric=False, summaries=False)
    changes = argument_changes(differ, body.get("args"), args_id)
    fields = [(name, f) for name, change in changes.items() for f in change.get("fields") or ()]
    if not changes or any(
        change.get("change") != "changed"
        or change.get("more")
        or change.get("stopped")
        or not change.get("fields")
        for change in changes.values()
    ):
        return []
    if not all(f.get("change") == "changed" and f.get("tensor") for _, f in fields):
        return []
    return [name + (f.get("path") or "") for name, f in fields]


def _newest_evaluation(store: Store, function: str) -> str | None:
    """The newest successful evaluation of *function*, else its newest failed one."""
    from ..odb.revisions import listed_evaluations

    listed, _ = listed_evaluations(store, functions=[function])
    for entry in listed:
        if any(ref.startswith("evals/") for ref in entry.get("refs") or ()):
            return entry["id"]
    return listed[0]["id"] if listed else None


def miss_reason(
    store: Store,
    function: str,
    args_id: str,
    code_digest: str,
    code_doc: Doc | None,
    docs: Mapping[str, Doc] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """Why a call missed, in one line, compared with the newest evaluation of *function*.

    Cheap: one listing of the function's refs, then the documents of the newest
    evaluation and of both argument sets (no blob is read, nothing is decoded).
    Never raises: a store it cannot read gives a reason that says so.

    Args:
        store: the store.
        function: the function's symbol (``module:qualname``).
        args_id: the id of the call's arguments document.
        code_digest: the call's code digest.
        code_doc: the call's code document (for the names of changed
            dependencies); None names none.
        docs: documents by id not written to the store yet (the call's
            arguments, hashed before the miss stores them: a ``HashSink``'s
            ``docs``); without them, arguments not stored yet give only
            ``"args changed"``.
        settings: the process settings in the call's key (``effects/process.py``).

    Returns:
        E.g. ``"first call"``, ``"lr changed"``, ``"lr, epochs changed"``,
        ``"code changed: train, loss_fn"``, ``"args changed: model.fc1.training"``,
        several joined by ``"; "``.
    """
    try:
        newest = _newest_evaluation(store, function)
        if newest is None:
            return "first call"
        body = store.evaluation(newest).body
        parts: list[str] = []
        if body.get("code_digest") != code_digest:
            parts.append(_code_reason(store, body.get("code"), code_doc))
        if body.get("args") != args_id:
            differ = NodeDiffer(store.objects, docs=docs, numeric=False, summaries=False)
            try:
                changes = argument_changes(differ, body.get("args"), args_id)
            except ObjectNotFound:
                # The call's arguments are neither stored yet nor among *docs*.
                changes = {}
            paths = change_paths(changes)
            if not paths:
                parts.append("args changed")
            elif all(p in changes for p in paths):
                parts.append(f"{_listing(paths)} changed")
            else:
                parts.append(f"args changed: {_listing(paths)}")
            if any(change.get("stopped") for change in changes.values()):
                parts.append(f"stopped comparing after {MAX_STEPS} nodes")
        stored_settings = body.get("settings") or {}
        if settings is not None and stored_settings != dict(settings):
            changed = sorted(set(stored_settings) | set(settings))
            parts.append(
                "process settings changed: "
                + ", ".join(
                    f"{name} {stored_settings.get(name, 'default')} -> "
                    f"{settings.get(name, 'default')}"
                    for name in changed
                    if stored_settings.get(name) != settings.get(name)
                )
            )
        if not parts:
            status = body.get("status")
            if status != "ok":
                return f"the last call with these arguments and code ended with status {status}"
            return (
                f"same code and arguments as evaluation {newest[:12]}: "
                "its version, RNG state or stored result differs"
            )
        return "; ".join(parts)
    except (MemostoreError, OSError, ValueError, KeyError, TypeError) as exc:
        return f"cannot tell why ({type(exc).__name__}: {exc})"


def _code_reason(store: Store, recorded_code: str | None, code_doc: Doc | None) -> str:
    if code_doc is None or not recorded_code:
        return "code changed"
    try:
        changes = code_changes(recorded_deps(store, recorded_code), deps_of(code_doc))
    except MemostoreError:
        return "code changed"
    names = [_short_symbol(c["symbol"]) for c in changes["changed"]]
    names += [_short_symbol(c["symbol"]) + " added" for c in changes["added"]]
    names += [_short_symbol(c["symbol"]) + " removed" for c in changes["removed"]]
    return f"code changed: {_listing(names)}" if names else "code changed"
