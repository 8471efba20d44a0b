"""The data of the dashboard's detail pages: one evaluation, a diff, why a call would miss.

Each function returns what the matching CLI command computes (through the
same functions of :mod:`memostore.inspect.inspection`, :mod:`memostore.inspect.comparison`
and :mod:`memostore.inspect.miss_check`), plus what only a browser can show: the
source of each code dependency, logged media, histograms and text. The
lineage graph is :mod:`.lineage`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .kinds import embedding_matrix, labels_of, pr_curve_point, projection
from .queries import BadRequest, flatten

if TYPE_CHECKING:
    from .queries import Catalog

# Kinds whose points carry a payload blob the page can show, and its media type.
_MEDIA = {"image": "image/png", "video": "image/gif", "audio": "audio/wav"}
# A logged clip names its content type: only these are sent as such (never, say,
# text/html, which the browser would run as a page of the dashboard).
_AUDIO_TYPES = ("audio/wav", "audio/x-wav", "audio/wave", "audio/mpeg", "audio/ogg", "audio/flac")
_SCALAR_KINDS = ("scalar",)
_MAX_EVENTS = 500


def _is_run(identifier: str) -> bool:
    return len(identifier) == 32


def _running(catalog: Catalog, run_id: str) -> Any:
    for run in catalog.running():
        if run.run_id == run_id:
            return run
    raise BadRequest(f"no running evaluation {run_id[:12]} (it may have ended)", 404)


def evaluation_page(catalog: Catalog, identifier: str) -> dict[str, Any]:
    """What ``memostore show`` prints, plus each dependency's source and the logged hparams.

    Also ``name`` (as the runs table names it) and ``runs``: ``{"runs": [{"name",
    "log_dir", "kind", "parent", "dir", "tags": {name: tag}}, ...], "sessions": [...]}``,
    the TensorBoard runs the evaluation logged into and the tag each of its names
    stands for there (``{}`` for logs without runs).
    """
    from ..inspect.comparison import recorded_deps
    from ..inspect.inspection import show_record

    store = catalog.store
    if _is_run(identifier):
        from ..inspect.inspection import running_show_record as live_record

        run = _running(catalog, identifier)
        logs = catalog.live_logs(run.run_id)
        with catalog.lock:
            if logs is not None:
                logs.poll()
            record = live_record(run, logs)
            hparams = logs.hparams() if logs is not None else {}
            runs = logs.runs() if logs is not None else {}
        record["name"] = catalog.name_of(identifier)
    else:
        try:
            record = show_record(store, identifier, load_codecs=False)
        except (MemostoreError, KeyError) as exc:
            raise BadRequest(f"no evaluation {identifier[:12]}: {exc}", 404) from exc
        hparams = logged_hparams(catalog, record.get("logs"))
        runs = _runs_of(catalog, record.get("logs"))
    code_id = (record.get("code") or {}).get("id")
    try:
        deps = recorded_deps(store, code_id)
    except MemostoreError:
        deps = {}
    for dep in (record.get("code") or {}).get("dependencies") or []:
        dep["source"] = (deps.get(dep["symbol"]) or {}).get("source")
    record["logged_hparams"] = hparams
    record["args_flat"] = flatten(record.get("args") or {})
    record["name"] = catalog.name_of(identifier, record.get("name"))
    record["runs"] = runs
    return record


def _runs_of(catalog: Catalog, logs_id: str | None) -> dict[str, Any]:
    """The ``runs`` and ``sessions`` of sealed logs (see :mod:`memostore.metrics.runs`)."""
    if not logs_id:
        return {}
    from ..metrics.read import load_manifest

    try:
        body = load_manifest(catalog.store, logs_id)
    except (MemostoreError, KeyError, ValueError):
        return {}
    return {k: body[k] for k in ("runs", "sessions") if k in body}


def logged_hparams(catalog: Catalog, logs_id: str | None) -> dict[str, Any]:
    """What ``add_hparams`` recorded in a logs document: ``{"hparams", "metrics", "domains"}``."""
    if not logs_id:
        return {}
    from ..metrics.read import logged_hparams as read_hparams

    try:
        return read_hparams(catalog.store, logs_id)
    except (MemostoreError, KeyError, ValueError):
        return {}


def tag_points(catalog: Catalog, identifier: str, tag: str) -> tuple[str, list[dict[str, Any]]]:
    """(kind, points) of one tag of a recorded or running evaluation."""
    if not tag:
        raise BadRequest("tag is required")
    if _is_run(identifier):
        _running(catalog, identifier)
        logs = catalog.live_logs(identifier)
        if logs is None:
            raise BadRequest(f"no running evaluation {identifier[:12]}", 404)
        with catalog.lock:
            logs.poll()
            summary = logs.summary()
            if tag not in summary:
                raise BadRequest(f"no tag {tag!r}", 404)
            return str(summary[tag]["kind"]), logs.events(tag)
    logs_id = catalog.logs_of(identifier)
    if logs_id is None:
        raise BadRequest(f"evaluation {identifier[:12]} logged nothing", 404)
    from ..metrics.read import load_events, metrics_summary

    summary = metrics_summary(catalog.store, logs_id)
    if tag not in summary:
        raise BadRequest(f"no tag {tag!r}", 404)
    return str(summary[tag]["kind"]), load_events(catalog.store, logs_id, tag)


def tag_events(catalog: Catalog, identifier: str, tag: str) -> dict[str, Any]:
    """The points of a non-scalar tag, as the page draws them (payloads by URL, not inline).

    Returns:
        ``{"kind", "count", "events"}``; at most the last 500 points; a point with a
        payload has ``media`` (its index for ``/api/media``) instead of the blob id.
    """
    kind, events = tag_points(catalog, identifier, tag)
    if kind in _SCALAR_KINDS:
        raise BadRequest(f"tag {tag!r} holds scalars: see /api/chart")
    start = max(0, len(events) - _MAX_EVENTS)
    shown = []
    for i in range(start, len(events)):
        if kind == "pr_curve":
            shown.append(pr_curve_point(events[i]))
            continue
        event = {k: v for k, v in events[i].items() if not _is_blob_field(k)}
        if (kind in _MEDIA or kind in ("embedding", "graph")) and events[i].get("blob"):
            event["media"] = i
        shown.append(event)
    return {"kind": kind, "count": len(events), "events": shown}


def embedding_projection(
    catalog: Catalog, identifier: str, tag: str, position: int
) -> dict[str, Any]:
    """One embedding point projected to 2-D (see :mod:`.kinds`), with its labels.

    Returns:
        ``{"step", "shape", "x", "y", "index", "explained", "labels", "label_name"}``;
        labels (None without metadata) are those of the rows drawn.
    """
    kind, events = tag_points(catalog, identifier, tag)
    if kind != "embedding" or not 0 <= position < len(events):
        raise BadRequest(f"no embedding {tag!r} point {position}", 404)
    event = events[position]
    blob = event.get("blob")
    if not isinstance(blob, str):
        raise BadRequest(f"point {position} of {tag!r} holds no matrix", 404)
    objects = catalog.store.objects
    try:
        matrix = embedding_matrix(event, objects.get_bytes(blob))
        tsv = event.get("metadata")
        labels, label_name = labels_of(
            objects.get_bytes(tsv) if isinstance(tsv, str) else None, matrix.shape[0]
        )
    except (MemostoreError, KeyError, ValueError) as exc:
        raise BadRequest(f"cannot read embedding {tag!r} point {position}: {exc}", 404) from exc
    drawn = projection(matrix)
    return {
        "step": event.get("step"),
        "shape": list(matrix.shape),
        **drawn,
        "labels": None if labels is None else [labels[i] for i in drawn["index"]],
        "label_name": label_name,
    }


def _is_blob_field(name: str) -> bool:
    # A graph's parameters come with its module tree (/api/graph), not with each point.
    return name in ("blob", "run_metadata", "sprite", "parts", "parameters")


def media_bytes(catalog: Catalog, identifier: str, tag: str, position: int) -> tuple[bytes, str]:
    """The payload of one image, video or audio point: (bytes, media type).

    The blob id comes from the logs, never from the request.
    """
    kind, events = tag_points(catalog, identifier, tag)
    if kind not in _MEDIA or not 0 <= position < len(events):
        raise BadRequest(f"no {tag!r} point {position} with a payload", 404)
    event = events[position]
    blob = event.get("blob")
    if not isinstance(blob, str):
        raise BadRequest(f"point {position} of {tag!r} holds no payload", 404)
    media_type = _MEDIA[kind]
    if kind == "audio" and event.get("content_type") in _AUDIO_TYPES:
        media_type = str(event["content_type"])
    return catalog.store.objects.get_bytes(blob), media_type


def diff_page(catalog: Catalog, a: str, b: str) -> dict[str, Any]:
    """What ``memostore diff A B`` prints, plus both argument lists for an 'all' view."""
    from ..inspect.comparison import diff_records

    if _is_run(a) or _is_run(b):
        raise BadRequest("a running evaluation has no record to compare yet")
    try:
        record = diff_records(catalog.store, a, b)
    except (MemostoreError, KeyError) as exc:
        raise BadRequest(f"cannot compare: {exc}", 404) from exc
    rows = {row["id"]: row for row in catalog.runs()["rows"]}
    record["args_all"] = {
        "a": (rows.get(a) or {}).get("args") or {},
        "b": (rows.get(b) or {}).get("args") or {},
    }
    return record


def why_miss_page(catalog: Catalog, identifier: str) -> dict[str, Any]:
    """Would the same call hit today: :func:`memostore.inspect.miss_check.why_miss` on source text.

    The dashboard runs no code: a module function is checked against its
    module's source file (found from the recorded working directory, read, not
    imported), as ``memostore diff REV --source FILE`` checks it. A pulled
    evaluation's recorded paths are not followed (its writer chose them).
    """
    from ..inspect.miss_check import why_miss
    from ..inspect.source_check import named_files_refusal

    if _is_run(identifier):
        raise BadRequest("a running evaluation has no record to check yet")
    try:
        body = catalog.store.evaluation(identifier).body
    except (MemostoreError, KeyError) as exc:
        raise BadRequest(f"no evaluation {identifier[:12]}", 404) from exc
    function = str(body.get("function") or "")
    module = function.partition(":")[0]
    sources: list[str] = []
    if (
        module not in ("__main__", "run", "")
        and named_files_refusal(catalog.store, identifier) is None
    ):
        found = _module_file(module, (body.get("provenance") or {}).get("cwd"))
        if found is None:
            return {
                "id": identifier,
                "function": function,
                "verdict": "unknown",
                "method": None,
                "reasons": [
                    f"the source of module {module} was not found under the recorded working "
                    f"directory; run `memostore diff {identifier[:12]}` in the project"
                ],
                "notes": [],
            }
        sources = [str(found)]
    return why_miss(catalog.store, identifier, sources=sources)


def _module_file(module: str, cwd: Any) -> Path | None:
    if not isinstance(cwd, str) or not module.replace(".", "").replace("_", "").isalnum():
        return None
    base = Path(cwd).joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if os.path.isfile(path):
            return path
    return None
