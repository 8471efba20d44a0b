"""``memostore diff REV``: would a call with this evaluation's arguments hit today, and why not.

Nothing recorded is ever imported or put on ``sys.path``: a store may be
shared, and a writer of it must not be able to make a reader run code.

* A function of an importable module that the user named (``memostore diff
  FN``) is resolved as the user's own ``python`` would resolve it from the
  current directory (``sys.path`` as this process has it, the current
  directory first as ``python -c`` puts it); today's dependency closure is
  computed and compared with the recorded one, and the call key is
  recomputed. Code that only stored values name (a class in the arguments)
  is checked only where that import already loaded it.
* Named by an evaluation id, the same function is checked from source text
  as below: its module's name comes from the store, so it is not imported.
* A function defined in a script run as ``__main__`` or in a notebook cell
  cannot be imported without running the whole program. Each recorded
  dependency's source is compared with today's text of the script (the
  recorded script path, read as text only), of a notebook or script given
  with ``--source``, and of the user's modules beside it, by
  :mod:`memostore.inspect.source_check`; what cannot be checked without running the
  code (global values) is listed as such.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..trust.signers import refusal
from .comparison import code_changes, recorded_deps
from .source_check import (
    MAIN,
    TodaySource,
    check_dependencies,
    is_kernel,
    named_files_refusal,
    python_path,
    read_source,
    recorded_script,
)

if TYPE_CHECKING:
    from ..odb.store import Store


def why_miss(
    store: Store,
    evaluation_id: str,
    sources: Sequence[str | os.PathLike[str]] = (),
    *,
    may_import: bool = False,
) -> dict[str, Any]:
    """Would a call with this evaluation's arguments hit today, and if not, why.

    Args:
        store: the store.
        evaluation_id: the evaluation.
        sources: today's script or notebook (``.py``, ``.ipynb``) to compare a
            ``__main__`` function's dependencies with, instead of the recorded
            script.
        may_import: the user named the function (not an evaluation id): its
            module may be imported from the current directory. Otherwise
            nothing is imported, whatever the evaluation names.

    Returns:
        ``{"id", "function", "method", "verdict", "reasons", "code", ...}``:
        ``method`` is ``import`` or ``source``; ``verdict`` is ``hit``,
        ``miss`` or ``unknown``; ``unchecked`` lists the dependencies that
        cannot be checked without running the code.
    """
    body = store.evaluation(evaluation_id).body
    function = str(body.get("function") or "")
    out: dict[str, Any] = {"id": evaluation_id, "function": function, "reasons": [], "notes": []}
    module, _, qualname = function.partition(":")
    if module == "run":
        out.update(method=None, verdict="unknown")
        out["reasons"].append(f"{function} is a standalone run, not a memoised function")
        return out
    if module == MAIN or sources or not may_import:
        _check_from_source(store, evaluation_id, body, out, sources)
        if module != MAIN and not sources:
            out["notes"].append(
                f"checked from source text: {module} is named by the store, not by you, so "
                f"it is not imported; `memostore diff {qualname}` imports it as python "
                "would from the current directory"
            )
    else:
        _check_by_import(store, body, out, module, qualname)
    out["notes"] += rng_notes(body.get("rng"))
    if body.get("status") != "ok":
        out["reasons"].append(f"this evaluation did not succeed (status {body.get('status')})")
        out["verdict"] = "miss"
    refused = refusal(store, evaluation_id)
    if refused is not None:
        out["reasons"].append(f"a hit does not serve it: {refused}")
        out["verdict"] = "miss"
    return out


# -- __main__ and notebooks: compare sources --------------------------------------------------
def _today_sources(
    store: Store,
    evaluation_id: str,
    body: Mapping[str, Any],
    sources: Sequence[str | os.PathLike[str]],
    out: dict[str, Any],
) -> TodaySource | None:
    provenance = body.get("provenance") or {}
    paths = [str(p) for p in sources]
    if not paths:
        refused = named_files_refusal(store, evaluation_id)
        if refused is not None:
            out["reasons"].append(refused)
            return None
        script = recorded_script(provenance)
        if script is None:
            out["reasons"].append(_no_source_reason(provenance))
            return None
        paths = [script]
    merged: TodaySource | None = None
    for path in paths:
        try:
            found = read_source(path)
        except (OSError, ValueError) as exc:
            out["reasons"].append(f"cannot read {path}: {exc}")
            continue
        if merged is None:
            merged = found
        else:
            merged.files.extend(found.files)
    if merged is not None:
        out["source"] = [str(p) for p in paths]
    return merged


def _no_source_reason(provenance: Mapping[str, Any]) -> str:
    if is_kernel(provenance):
        return (
            "defined in a notebook cell: the kernel's cells cannot be read from outside it; "
            "pass the notebook with --source NOTEBOOK.ipynb"
        )
    argv = provenance.get("argv") or []
    script = str(argv[0]) if argv else ""
    if script in ("", "-c", "-"):
        return (
            "it ran from `python -c` or standard input: there is no file to read today's "
            "source from; pass one with --source PATH"
        )
    return f"the script it ran from ({script}) no longer exists; pass it with --source PATH"


def _check_from_source(
    store: Store,
    evaluation_id: str,
    body: Mapping[str, Any],
    out: dict[str, Any],
    sources: Sequence[str | os.PathLike[str]],
) -> None:
    out["method"] = "source"
    reasons: list[str] = out["reasons"]
    main = _today_sources(store, evaluation_id, body, sources, out)
    deps = recorded_deps(store, body.get("code"))
    search = ([os.path.dirname(main.origin)] if main is not None else []) + python_path()
    checked = check_dependencies(deps, main, search)
    out["code"] = {
        "recorded": body.get("code_digest"),
        "current": None,
        "changed": checked["changed"],
        "missing": checked["missing"],
    }
    out["unchecked"] = checked["unchecked"]
    for entry in checked["changed"]:
        reasons.append(f"{entry['symbol']} changed")
    for entry in checked["missing"]:
        reasons.append(f"{entry['symbol']}: {entry['why']}")
    if main is None or reasons:
        out["verdict"] = "miss" if checked["changed"] or checked["missing"] else "unknown"
        return
    if checked["unchecked"]:
        out["verdict"] = "unknown"
        out["notes"].append(
            "no dependency that can be read from the source changed; the ones listed as "
            "unchecked can only be known by running the code"
        )
        return
    # Every dependency is as recorded, so today's key is the recorded key.
    out["verdict"] = _ref_verdict(store, body, body.get("key"), out)


# -- importable modules: compute today's closure ----------------------------------------------
@contextlib.contextmanager
def _users_python_path() -> Iterator[None]:
    """``sys.path`` as ``python`` in the current directory has it, for the duration."""
    saved = list(sys.path)
    sys.path[:] = python_path()
    try:
        yield
    finally:
        sys.path[:] = saved


def _check_by_import(
    store: Store, body: Mapping[str, Any], out: dict[str, Any], module: str, qualname: str
) -> None:
    from ..code.deps import code_info
    from ..values.code_refs import resolve

    out["method"] = "import"
    reasons: list[str] = out["reasons"]
    with _users_python_path():
        try:
            obj = resolve(module, qualname)
        except LookupError as exc:
            recorded = (body.get("provenance") or {}).get("cwd")
            message = (
                f"{exc} (from {os.getcwd()}); run `memostore diff` where you run your code"
                + (f" (it ran in {recorded})" if recorded else "")
            )
            out.update(verdict="unknown", error=message)
            reasons.append(message)
            return
        fn = getattr(obj, "__wrapped__", obj)
        version = getattr(obj, "version", body.get("version"))
        try:
            info = code_info(fn)
        except Exception as exc:  # analysing today's code runs the user's imports
            message = f"cannot analyse today's code of {module}:{qualname}: {exc}"
            out.update(verdict="unknown", error=message)
            reasons.append(message)
            return
        current = {
            s: {"kind": d.kind, "digest": d.digest, "source": d.source}
            for s, d in info.deps.items()
        }
        changes = code_changes(recorded_deps(store, body.get("code")), current)
        out["code"] = {"recorded": body.get("code_digest"), "current": info.digest, **changes}
        if info.digest != body.get("code_digest"):
            parts = [f"{c['symbol']} changed" for c in changes["changed"]]
            parts += [f"{c['symbol']} added" for c in changes["added"]]
            parts += [f"{c['symbol']} removed" for c in changes["removed"]]
            reasons.append("code changed: " + (", ".join(parts) or "the closure digest differs"))
        out["version"] = {"recorded": body.get("version"), "current": version}
        if version != body.get("version"):
            reasons.append(f"version changed: {body.get('version')!r} -> {version!r}")
        out["stored_code"], out["unchecked"] = _stored_code_changes(store, body)
        for ref in out["stored_code"]:
            what = "is gone" if ref["current"] is None else "changed"
            reasons.append(f"code stored in the {ref['where']} ({ref['symbol']}) {what}")
    key = None
    if body.get("key") and body.get("args"):
        from ..records.evaluation import call_key

        key = call_key(
            str(body.get("function")), info.digest, body["args"], version, body.get("settings")
        )
    out["verdict"] = _ref_verdict(store, body, key, out) if not reasons else "miss"


def _stored_code_changes(
    store: Store, body: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Code references in the arguments and result whose code changed; those not checkable."""
    from ..code.deps import code_info, is_user_module
    from ..values.code_refs import resolve

    stale, unchecked = [], []
    roots = [("args", body.get("args")), ("result", body.get("result"))]
    for ref in stored_code_refs(store, roots):
        module, _, qualname = ref["symbol"].partition(":")
        if module == MAIN:
            # A __main__ class stored by value: its digest needs the running script.
            unchecked.append({"symbol": ref["symbol"], "kind": "class", "why": "stored by value"})
            continue
        if module not in sys.modules:
            # Only stored data names it: never imported for that (a store is shared).
            unchecked.append(
                {"symbol": ref["symbol"], "kind": "class", "why": "not imported by your code"}
            )
            continue
        if not is_user_module(module):
            continue  # only the user's own code carries a digest to check
        try:
            now = code_info(resolve(module, qualname)).digest
        except Exception:  # the code is gone, or importing it failed
            now = None
        if now != ref["digest"]:
            stale.append({**ref, "current": now})
    return stale, unchecked


def _ref_verdict(store: Store, body: Mapping[str, Any], key: Any, out: dict[str, Any]) -> str:
    """``hit`` when today's key names a stored result, else ``miss`` (with the reason)."""
    from ..records.evaluation import eval_ref_name

    if not isinstance(key, str):
        return "hit"
    function = str(body.get("function"))
    ref_name = eval_ref_name(function, key)
    try:
        points_to = store.refs.read(ref_name)
    except MemostoreError as exc:
        points_to = None
        out["notes"].append(f"cannot read {ref_name}: {exc}")
    out["key"] = {"recorded": body.get("key"), "current": key}
    out["ref"] = {"name": ref_name, "points_to": points_to}
    if points_to is None:
        out["reasons"].append(f"no result is stored under {ref_name}")
        return "miss"
    if points_to != out["id"]:
        out["current_evaluation"] = points_to
    return "hit"


def stored_code_refs(store: Store, roots: Iterable[tuple[str, str | None]]) -> list[dict[str, Any]]:
    """Digest-pinned code references inside stored values: ``{"where", "symbol", "digest"}``."""
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


def rng_notes(record: Mapping[str, Any] | None) -> list[str]:
    """What the global RNGs a stored body drew from ask of a call, by their lineage then."""
    seeded, unseeded, unknown = [], [], []
    for name, entry in sorted((record or {}).items()):
        if not isinstance(entry, Mapping) or not entry.get("before"):
            continue  # seeded by the body before it drew: any start state
        flag = entry.get("seeded")
        (seeded if flag is True else unseeded if flag is False else unknown).append(name)
    notes = []
    if seeded:
        notes.append(
            f"the body drew from the seeded global RNG(s) {', '.join(seeded)}: a call hits only "
            "from the recorded start state (seeded as before; else seeded: start state differs)"
        )
    if unseeded:
        notes.append(
            f"the body drew from the unseeded global RNG(s) {', '.join(unseeded)}: unseeded RNG: "
            "served the stored run, whatever the start state of the call (with rng='exact', "
            "only from the recorded one)"
        )
    if unknown:
        notes.append(
            f"the body drew from the global RNG(s) {', '.join(unknown)}: a call that seeded them "
            "hits only from the recorded start state, an unseeded one from any"
        )
    return notes
