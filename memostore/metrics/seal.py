"""Sealing a journal into content-addressed objects: column chunks and a manifest.

The logs document (kind ``logs``) is the manifest of one evaluation::

    {"format": 1,
     "tags": {tag: {"kind": "scalar" | one of event_kinds.TAG_KINDS,
                    "count", "step_min", "step_max",
                    "first", "last", "min", "max", "nan_count",   # scalars
                    "style": "float" | "double",                  # new-style scalars only
                    "tag": the tag logged, where it differs from the name,
                    "chunks": [{"count", "data": blob id, "walls": blob id}]}},
     "hparams": {name: value}, "hparam_metrics": [tag, ...],
     "hparam_domains": {name: [value, ...]},
     "runs": [...], "sessions": [...]}                    # see memostore.metrics.runs

Non-finite numbers in the manifest are the strings ``"NaN"``, ``"Infinity"``
and ``"-Infinity"`` (canonical JSON has no other way to say them). A chunk's
``data`` blob holds the steps and the values; its ``walls`` blob holds the
wall times alone, so that two deterministic runs share every ``data`` blob.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..odb.objects import KIND_LOGS, Doc, Links
from .columns import encode_columns
from .event_kinds import SCALAR_STYLE, TAG_KINDS, event_blobs, event_columns
from .journal import Contents
from .runs import annotate

LOGS_FORMAT = 1
SCALAR_CHUNK = 1 << 16
EVENT_CHUNK = 1 << 10


def json_number(x: float | None) -> float | str | None:
    """A float as canonical JSON can hold it (non-finite values as strings)."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def from_json_number(x: Any) -> float | None:
    """Inverse of :func:`json_number`."""
    if x is None:
        return None
    if isinstance(x, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[x]
    return float(x)


def json_safe(value: Any) -> Any:
    """A hyper-parameter value as canonical JSON can hold it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return json_number(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return json_safe(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


class _Builder:
    """Writes chunk blobs into an object store and collects their ids."""

    def __init__(self, objects: Any) -> None:
        self.objects = objects
        self.blobs: set[str] = set()

    def put(self, columns: dict[str, tuple[str, Any]]) -> str:
        blob_id = self.objects.add_bytes(encode_columns(columns))
        self.blobs.add(blob_id)
        return blob_id


def _scalar_entry(
    b: _Builder, steps: np.ndarray, values: np.ndarray, walls: np.ndarray
) -> dict[str, Any]:
    chunks = []
    for a in range(0, len(steps), SCALAR_CHUNK):
        z = a + SCALAR_CHUNK
        data = b.put({"steps": ("i8", steps[a:z]), "values": ("f8", values[a:z])})
        wall_id = b.put({"walls": ("f8", walls[a:z])})
        chunks.append({"count": len(steps[a:z]), "data": data, "walls": wall_id})
    finite = values[~np.isnan(values)]
    return {
        "kind": "scalar",
        "count": len(steps),
        "step_min": int(steps.min()),
        "step_max": int(steps.max()),
        "first": json_number(values[0]),
        "last": json_number(values[-1]),
        "min": json_number(finite.min() if len(finite) else math.nan),
        "max": json_number(finite.max() if len(finite) else math.nan),
        "nan_count": len(values) - len(finite),
        "chunks": chunks,
    }


def _event_entry(b: _Builder, kind: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    chunks = []
    for a in range(0, len(events), EVENT_CHUNK):
        part = events[a : a + EVENT_CHUNK]
        data = b.put(event_columns(kind, part))
        walls = b.put({"walls": ("f8", np.array([e["wall"] for e in part], dtype=np.float64))})
        chunks.append({"count": len(part), "data": data, "walls": walls})
    steps = [int(e["step"]) for e in events]
    entry: dict[str, Any] = {
        "kind": kind,
        "count": len(events),
        "step_min": min(steps),
        "step_max": max(steps),
        "first": None,
        "last": None,
        "min": None,
        "max": None,
        "nan_count": 0,
        "chunks": chunks,
    }
    if kind == "histogram":
        entry["min"] = json_number(min((float(e["min"]) for e in events), default=math.nan))
        entry["max"] = json_number(max((float(e["max"]) for e in events), default=math.nan))
    return entry


def _scalar_arrays(batches: Iterable[tuple[bytes, bytes, bytes]]) -> tuple[np.ndarray, ...]:
    batches = list(batches)
    steps = np.frombuffer(b"".join(s for s, _, _ in batches), dtype="<i8")
    values = np.frombuffer(b"".join(v for _, v, _ in batches), dtype="<f8")
    walls = np.frombuffer(b"".join(w for _, _, w in batches), dtype="<f8")
    return steps, values, walls


def build_logs(objects: Any, contents: Contents) -> Doc | None:
    """Store the chunks of *contents* and return its (unstored) logs document.

    Returns None when nothing was logged.
    """
    runs = annotate(contents)  # first: it drops the points purge_step hides
    b = _Builder(objects)
    tags: dict[str, dict[str, Any]] = {}
    payload_blobs: set[str] = set()
    for tag, batches in contents.scalars.items():
        steps, values, walls = _scalar_arrays(batches)
        if len(steps):
            tags[tag] = _scalar_entry(b, steps, values, walls)

    by_tag: dict[tuple[str, str], list[dict[str, Any]]] = {}
    hparams: dict[str, Any] = {}
    metrics: list[str] = []
    domains: dict[str, Any] = {}
    for event in contents.events:
        kind = event.get("kind")
        if kind == "hparams":
            hparams.update(event.get("hparams", {}))
            metrics.extend(m for m in event.get("metrics", []) if m not in metrics)
            domains.update(event.get("domains") or {})
        elif kind == SCALAR_STYLE:
            entry = tags.get(event["tag"])
            if entry is not None and entry["kind"] == "scalar":
                entry["style"] = event["style"]
        elif kind in TAG_KINDS:
            by_tag.setdefault((event["tag"], kind), []).append(event)
            payload_blobs.update(event_blobs(event))
    for (tag, kind), events in by_tag.items():
        # One tag, one kind in the manifest: a tag reused for another kind keeps
        # its points under "tag#kind" rather than losing them.
        name = tag if tag not in tags else f"{tag}#{kind}"
        tags[name] = _event_entry(b, kind, events)
        if name != tag:
            tags[name]["tag"] = tag

    if not tags and not hparams:
        return None
    body = {
        "format": LOGS_FORMAT,
        "tags": dict(sorted(tags.items())),
        "hparams": {k: json_safe(v) for k, v in sorted(hparams.items())},
        "hparam_metrics": metrics,
        "hparam_domains": {k: [json_safe(x) for x in v] for k, v in sorted(domains.items())},
        **runs,
    }
    return Doc(KIND_LOGS, body, Links(blobs=b.blobs | payload_blobs))


def seal(objects: Any, contents: Contents) -> str | None:
    """Store *contents* as chunks plus a manifest; the manifest's id, or None if empty."""
    doc = build_logs(objects, contents)
    if doc is None:
        return None
    return objects.add_doc(doc)
