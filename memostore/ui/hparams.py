"""Hyper-parameter sessions across evaluations, as TensorBoard's HParams tab lists them.

A session is what the HParams tab shows as one row, and the same sessions
``export tensorboard`` writes (:mod:`memostore.metrics.tb_hparams`):

* each ``add_hparams`` call: its hyper-parameters, and as metrics the last
  value of each metric it named, in its own run (as torch's writer writes it);
* an evaluation that called ``add_hparams`` nowhere, when it has scalar
  arguments: those arguments, and as metrics the last value of each scalar
  of its main run.

Sealed logs never change, so what each contributes is kept by logs id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .queries import BadRequest, check_id

if TYPE_CHECKING:
    from .queries import Catalog


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _sessions_of(
    logs: Mapping[str, Any],
    summary: Mapping[str, Mapping[str, Any]],
    arguments: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The sessions of one evaluation (without its id and name).

    Args:
        logs: its ``runs``, ``sessions``, ``hparams`` and ``hparam_metrics`` (a
            logs document's body, or what a journal declared so far).
        summary: its tags' summaries (``last`` of each scalar).
        arguments: its call's scalar arguments.
    """
    from ..metrics.runs import export_plan

    dirs = {r["name"]: r.get("dir", "") for r in logs.get("runs", [])}
    out = []
    for session in logs.get("sessions", []):
        metrics = {}
        for tag, name in zip(session.get("metrics", []), session.get("names", []), strict=False):
            metrics[tag] = _number((summary.get(name) or {}).get("last"))
        out.append(
            {
                "run": session.get("run"),
                "dir": dirs.get(session.get("run"), ""),
                "hparams": dict(session.get("hparams") or {}),
                "domains": dict(session.get("domains") or {}),
                "metrics": metrics,
            }
        )
    if out:
        return out
    # No add_hparams session: the evaluation is one, as export writes it.
    hparams = {**(logs.get("hparams") or {}), **arguments}
    if not hparams:
        return []
    tags = {"tags": {n: {"kind": s.get("kind")} for n, s in summary.items()}}
    _, names, _ = export_plan({**logs, **tags})[0]
    logged = [m for m in logs.get("hparam_metrics") or [] if m in names.values()]
    by_tag = {tag: name for name, tag in names.items()}
    chosen = logged or [
        t for n, t in names.items() if (summary.get(n) or {}).get("kind") == "scalar"
    ]
    metrics = {tag: _number((summary.get(by_tag[tag]) or {}).get("last")) for tag in chosen}
    return [{"run": None, "dir": "", "hparams": hparams, "domains": {}, "metrics": metrics}]


def _recorded(catalog: Catalog, evaluation_id: str) -> list[dict[str, Any]]:
    from ..metrics.read import load_manifest

    try:
        body = catalog.store.evaluation(evaluation_id).body
    except (MemostoreError, KeyError) as exc:
        raise BadRequest(f"no evaluation {evaluation_id[:12]}", 404) from exc
    logs_id = body.get("logs")
    arguments = dict(body.get("hparams") or {})
    if not isinstance(logs_id, str):
        return _sessions_of({}, {}, arguments)
    key = ("sessions", evaluation_id)
    cached = catalog.derived.get(key)
    if cached is None:
        try:
            manifest = load_manifest(catalog.store, logs_id)
        except (MemostoreError, KeyError, ValueError):
            manifest = {}
        logs = {
            k: manifest[k]
            for k in ("runs", "sessions", "hparams", "hparam_metrics")
            if k in manifest
        }
        cached = _sessions_of(logs, catalog.summary_of(logs_id), arguments)
        catalog.derived[key] = cached
    return cached


def _running(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    run = next((r for r in catalog.running() if r.run_id == run_id), None)
    logs = catalog.live_logs(run_id)
    if run is None or logs is None:
        raise BadRequest(f"no running evaluation {run_id[:12]}", 404)
    with catalog.lock:
        logs.poll()
        declared = logs.runs()
        logged = logs.hparams()
        summary = logs.summary()
    body = {**declared, "hparams": logged["hparams"], "hparam_metrics": logged["metrics"]}
    return _sessions_of(body, summary, run.hparams)


def hparams_sessions(catalog: Catalog, ids: list[str]) -> dict[str, Any]:
    """The sessions of the evaluations *ids* (every evaluation listed when empty).

    Returns:
        ``{"hparams": [{"name", "type", "values", "domain"}], "metrics": [tag, ...],
        "sessions": [{"id", "name", "run", "status", "hparams", "metrics"}]}``:
        ``type`` is ``number``, ``bool`` or ``string``; ``values`` the distinct
        values the sessions hold (sorted), ``domain`` those ``add_hparams`` was
        told of (``hparam_domain_discrete``) or None; a session's ``name`` is
        the evaluation's, followed by ``/`` and its run's directory below it
        when it has one (``lr0.1_seed4/1715851234.57``), as TensorBoard names
        it; a metric the session's run has no finite value of is null.
    """
    rows = {r["id"]: r for r in catalog.runs()["rows"]}
    wanted = [check_id(i) for i in ids] if ids else list(rows)
    sessions: list[dict[str, Any]] = []
    for identifier in wanted:
        found = (
            _running(catalog, identifier)
            if len(identifier) == 32
            else _recorded(catalog, identifier)
        )
        name = catalog.name_of(identifier)
        row = rows.get(identifier) or {}
        for session in found:
            sessions.append(
                {
                    "id": identifier,
                    "name": f"{name}/{session['dir']}" if session["dir"] else name,
                    "run": session["run"],
                    "status": row.get("status"),
                    "hparams": session["hparams"],
                    "metrics": session["metrics"],
                    "domains": session["domains"],
                }
            )
    columns: dict[str, list[Any]] = {}
    domains: dict[str, list[Any]] = {}
    metrics: dict[str, None] = {}
    for session in sessions:
        for name, value in session["hparams"].items():
            columns.setdefault(name, []).append(value)
        for name, values in session.pop("domains").items():
            domains.setdefault(name, list(values))
        metrics.update(dict.fromkeys(session["metrics"]))
    return {
        "hparams": [_column(n, v, domains.get(n)) for n, v in sorted(columns.items())],
        "metrics": sorted(metrics),
        "sessions": sessions,
    }


def _column(name: str, values: list[Any], domain: list[Any] | None) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        kind = "bool"
    elif present and all(_number(v) is not None or isinstance(v, (int, float)) for v in present):
        kind = "number"
    else:
        kind = "string"
    distinct = {json.dumps(v, sort_keys=True): v for v in present}
    ordered = sorted(distinct.values(), key=_order)
    return {"name": name, "type": kind, "values": ordered, "domain": domain}


def _order(value: Any) -> tuple[int, float, str]:
    # Numbers by value, then everything else by its text.
    number = _number(value)
    return (0, number, "") if number is not None else (1, 0.0, str(value))
