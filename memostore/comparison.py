"""What ``memostore diff`` displays, as JSON-able dicts.

``diff_records(store, a, b)`` compares two evaluations: arguments, code (a
unified diff of each changed dependency's source), result tensors and metrics.
``why_miss(store, id)`` compares one evaluation's recorded code with today's:
would the same call hit now, and if not, why.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .errors import MemostoreError
from .inspection import metrics_of
from .objects import KIND_CODE, KIND_VALUE
from .summaries import SummaryReader

if TYPE_CHECKING:
    from .store import Store

DIFF_CONTEXT = 3
_METRIC_DELTAS = ("last", "min")


# -- code ---------------------------------------------------------------------------------
def recorded_deps(store: Store, code_id: str | None) -> dict[str, dict[str, Any]]:
    """The dependencies in a code document: {symbol: {kind, digest, source}}."""
    if not code_id:
        return {}
    doc = store.objects.get_doc(code_id)
    if doc.kind != KIND_CODE:
        raise MemostoreError(f"object {code_id} is a {doc.kind}, not code")
    return {d["symbol"]: d for d in doc.body.get("deps") or []}


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


# -- arguments ---------------------------------------------------------------------------
def _argument_nodes(store: Store, args_id: str | None) -> dict[str, Any]:
    if not args_id:
        return {}
    doc = store.objects.get_doc(args_id)
    node = doc.body.get("node") if doc.kind == KIND_VALUE else None
    if not isinstance(node, dict) or node.get("$") != "args":
        return {}
    return {name: value for name, value in node.get("items", [])}


def argument_changes(store: Store, args_a: str | None, args_b: str | None) -> dict[str, Any]:
    """{name: {"change", "a", "b"}} for each argument whose encoding differs."""
    if args_a == args_b:
        return {}
    nodes_a, nodes_b = _argument_nodes(store, args_a), _argument_nodes(store, args_b)
    reader = SummaryReader(store.objects)
    changes: dict[str, Any] = {}
    for name in list(nodes_a) + [n for n in nodes_b if n not in nodes_a]:
        in_a, in_b = name in nodes_a, name in nodes_b
        # Equal encodings are equal values: nodes hold digests of what they reference.
        if in_a and in_b and nodes_a[name] == nodes_b[name]:
            continue
        changes[name] = {
            "change": "changed" if in_a and in_b else ("removed" if in_a else "added"),
            "a": reader.summarize(nodes_a[name]) if in_a else None,
            "b": reader.summarize(nodes_b[name]) if in_b else None,
        }
    return changes


# -- results -----------------------------------------------------------------------------
def result_changes(store: Store, evaluation_a: str, evaluation_b: str) -> dict[str, Any]:
    """How two results differ: identical, or the tensors and values that changed."""
    from .evaluation import Evaluation
    from .result_diff import compare_leaves

    first = Evaluation.load(store, evaluation_a)
    second = Evaluation.load(store, evaluation_b)
    id_a, id_b = first.result_id, second.result_id
    if id_a == id_b:
        return {"same": id_a is not None, "a": id_a, "b": id_b}
    reader = SummaryReader(store.objects)
    out: dict[str, Any] = {"same": False, "a": id_a, "b": id_b}
    if id_a is None or id_b is None:
        out["summary"] = {
            "a": reader.summarize_doc(id_a) if id_a else None,
            "b": reader.summarize_doc(id_b) if id_b else None,
        }
        return out
    try:
        value_a = first.load_result()
        value_b = second.load_result()
    except Exception as exc:  # restoring runs user code (and may find it changed)
        out["error"] = f"cannot restore both results to compare them: {type(exc).__name__}: {exc}"
        out["summary"] = {"a": reader.summarize_doc(id_a), "b": reader.summarize_doc(id_b)}
        return out
    report, identical = compare_leaves(value_a, value_b)
    out.update(report)
    # Different encodings can restore to equal values (e.g. a different dtype tag).
    out["same"] = identical
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


def diff_records(
    store: Store, id_a: str, id_b: str, import_paths: Iterable[str] = ()
) -> dict[str, Any]:
    """Everything ``memostore diff A B`` displays.

    Comparing results restores them, which imports the code they refer to:
    *import_paths* go in front of ``sys.path`` meanwhile.
    """
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
    return {
        "a": {"id": id_a, "function": body_a.get("function"), "status": body_a.get("status")},
        "b": {"id": id_b, "function": body_b.get("function"), "status": body_b.get("status")},
        "args": argument_changes(store, body_a.get("args"), body_b.get("args")),
        "code": code,
        "result": _with_paths(import_paths, result_changes, store, id_a, id_b),
        "metrics": metric_changes(store, body_a.get("logs"), body_b.get("logs")),
    }


# -- why would this call miss now? -----------------------------------------------------------
@contextmanager
def _import_paths(paths: Iterable[str]) -> Iterator[None]:
    added = [p for p in paths if p and p not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)


def _resolve_function(symbol: str) -> Any:
    from .code_refs import resolve

    module, _, qualname = symbol.partition(":")
    if module == "__main__":
        raise LookupError(
            f"{symbol} was defined in a script run as __main__; "
            "it cannot be imported to compare (move it into a module)"
        )
    if module == "run":
        raise LookupError(f"{symbol} is a standalone run, not a memoised function")
    return resolve(module, qualname)


def _stored_code_refs(
    store: Store, roots: Iterable[tuple[str, str | None]]
) -> list[dict[str, Any]]:
    """Digest-pinned code references inside stored values: (where, module, qualname, digest)."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for where, root in roots:
        if not root:
            continue
        stack, seen = [root], set()
        while stack:
            doc_id = stack.pop()
            if doc_id in seen:
                continue
            seen.add(doc_id)
            try:
                doc = store.objects.get_doc(doc_id)
            except MemostoreError:
                continue
            stack.extend(doc.links.docs)
            for node in _code_nodes(doc.body.get("node")):
                key = (node["module"], node["qualname"], node["digest"])
                found.setdefault(
                    key, {"where": where, "symbol": f"{key[0]}:{key[1]}", "digest": key[2]}
                )
    return list(found.values())


def _code_nodes(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if item.get("$") == "code" and item.get("digest") and "module" in item:
                yield item
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))


def _with_paths(paths: Iterable[str], fn: Any, *args: Any) -> Any:
    with _import_paths(paths):
        return fn(*args)


def why_miss(store: Store, evaluation_id: str, import_paths: Iterable[str] = ()) -> dict[str, Any]:
    """Would a call with this evaluation's arguments hit today, and if not, why.

    Imports the function's module (with *import_paths* in front of ``sys.path``)
    and compares today's dependency closure with the recorded one.
    """
    from .code_deps import code_info
    from .code_refs import resolve
    from .evaluation import eval_ref_name
    from .memoize import call_key

    body = store.evaluation(evaluation_id).body
    function = body.get("function") or ""
    out: dict[str, Any] = {"id": evaluation_id, "function": function, "reasons": []}
    reasons: list[str] = out["reasons"]
    with _import_paths(import_paths):
        try:
            obj = _resolve_function(function)
        except LookupError as exc:
            out.update(verdict="unknown", error=str(exc))
            reasons.append(str(exc))
            return out
        fn = getattr(obj, "__wrapped__", obj)
        version = getattr(obj, "version", body.get("version"))
        try:
            info = code_info(fn)
        except Exception as exc:  # analysing today's code runs the user's imports
            message = f"cannot analyse today's code of {function}: {type(exc).__name__}: {exc}"
            out.update(verdict="unknown", error=message)
            reasons.append(message)
            return out
        current = {
            s: {"kind": d.kind, "digest": d.digest, "source": d.source}
            for s, d in info.deps.items()
        }
        recorded = recorded_deps(store, body.get("code"))
        changes = code_changes(recorded, current)
        out["code"] = {"recorded": body.get("code_digest"), "current": info.digest, **changes}
        if info.digest != body.get("code_digest"):
            parts = [f"{c['symbol']} changed" for c in changes["changed"]]
            parts += [f"{c['symbol']} added" for c in changes["added"]]
            parts += [f"{c['symbol']} removed" for c in changes["removed"]]
            reasons.append("code changed: " + (", ".join(parts) or "the closure digest differs"))
        out["version"] = {"recorded": body.get("version"), "current": version}
        if version != body.get("version"):
            reasons.append(f"version changed: {body.get('version')!r} -> {version!r}")
        stale = []
        for ref in _stored_code_refs(
            store, [("args", body.get("args")), ("result", body.get("result"))]
        ):
            module, _, qualname = ref["symbol"].partition(":")
            try:
                now = code_info(resolve(module, qualname)).digest
            except Exception:
                now = None
            if now != ref["digest"]:
                stale.append({**ref, "current": now})
                what = "is gone" if now is None else "changed"
                reasons.append(f"code stored in the {ref['where']} ({ref['symbol']}) {what}")
        out["stored_code"] = stale
    if body.get("key") and body.get("args"):
        key = call_key(function, info.digest, body["args"], version)
        ref_name = eval_ref_name(function, key)
        points_to = store.refs.read(ref_name)
        out["key"] = {"recorded": body.get("key"), "current": key}
        out["ref"] = {"name": ref_name, "points_to": points_to}
        if points_to is None and not reasons:
            reasons.append(f"no result is stored under {ref_name}")
        elif points_to is not None and points_to != evaluation_id:
            out["current_evaluation"] = points_to
    if body.get("status") != "ok":
        reasons.append(f"this evaluation did not succeed (status {body.get('status')})")
    out["verdict"] = "miss" if reasons else "hit"
    return out
