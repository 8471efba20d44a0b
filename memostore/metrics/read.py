"""Reading sealed logs: summaries, series, events, sparklines.

Every function takes a store and the id of a logs document (an evaluation's
``logs`` field, :attr:`memostore.Evaluation.logs_id`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MalformedObject
from ..odb.objects import KIND_LOGS
from .columns import decode_columns
from .event_kinds import decode_events
from .seal import from_json_number

if TYPE_CHECKING:
    from ..odb.store import Store

_BARS = "▁▂▃▄▅▆▇█"
# A series whose range is below this fraction of its magnitude is drawn flat.
_FLAT = 1e-6
_SUMMARY_FIELDS = ("first", "last", "min", "max")


def load_manifest(store: Store, logs_id: str) -> dict[str, Any]:
    """The body of a logs document (see :mod:`memostore.metrics.seal`)."""
    doc = store.objects.get_doc(logs_id)
    if doc.kind != KIND_LOGS:
        raise MalformedObject(f"{logs_id} is a {doc.kind}, not a logs document")
    return doc.body


def metrics_summary(store: Store, logs_id: str) -> dict[str, dict[str, Any]]:
    """Tag -> ``{"kind", "count", "first", "last", "min", "max", "nan_count",
    "step_min", "step_max"}``, from the manifest alone (no chunk is read).

    ``first``/``last``/``min``/``max`` are floats (NaN and infinities included;
    ``min``/``max`` skip NaN) for scalars, None for images and text; for a
    histogram ``min``/``max`` are over all its values.
    """
    out: dict[str, dict[str, Any]] = {}
    for tag, entry in load_manifest(store, logs_id).get("tags", {}).items():
        summary = {
            "kind": entry["kind"],
            "count": entry["count"],
            "step_min": entry["step_min"],
            "step_max": entry["step_max"],
            "nan_count": entry.get("nan_count", 0),
        }
        for name in _SUMMARY_FIELDS:
            summary[name] = from_json_number(entry.get(name))
        out[tag] = summary
    return out


def logged_hparams(store: Store, logs_id: str) -> dict[str, Any]:
    """``{"hparams", "metrics", "domains"}`` recorded by ``add_hparams``."""
    body = load_manifest(store, logs_id)
    return {
        "hparams": dict(body.get("hparams", {})),
        "metrics": list(body.get("hparam_metrics", [])),
        "domains": dict(body.get("hparam_domains", {})),
    }


def _entry(store: Store, logs_id: str, tag: str) -> dict[str, Any]:
    tags = load_manifest(store, logs_id).get("tags", {})
    if tag not in tags:
        known = ", ".join(sorted(tags)) or "none"
        raise KeyError(f"no tag {tag!r} in these logs (tags: {known})")
    return tags[tag]


def _chunks(store: Store, entry: dict[str, Any], walls: bool = True) -> list[tuple[dict, Any]]:
    out = []
    for chunk in entry["chunks"]:
        data = decode_columns(store.objects.get_bytes(chunk["data"]))
        wall = decode_columns(store.objects.get_bytes(chunk["walls"]))["walls"] if walls else None
        out.append((data, wall))
    return out


def _concat(parts: list[Any], dtype: str) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def load_series(store: Store, logs_id: str, tag: str) -> tuple[np.ndarray, ...]:
    """``(steps int64, values float64, walltimes float64)`` of a tag, in logged order.

    A histogram tag gives the mean of each histogram as its value. Raises
    KeyError for an unknown tag and ValueError for an image or text tag.
    """
    entry = _entry(store, logs_id, tag)
    kind = entry["kind"]
    if kind not in ("scalar", "histogram"):
        raise ValueError(f"tag {tag!r} holds {kind} points, not numbers")
    steps, values, walls = [], [], []
    for data, wall in _chunks(store, entry):
        steps.append(data["steps"])
        walls.append(wall)
        if kind == "scalar":
            values.append(data["values"])
        else:
            stats = data["stats"].reshape(-1, 5)
            with np.errstate(divide="ignore", invalid="ignore"):
                values.append(stats[:, 3] / stats[:, 2])
    return _concat(steps, "<i8"), _concat(values, "<f8"), _concat(walls, "<f8")


def load_events(store: Store, logs_id: str, tag: str) -> list[dict[str, Any]]:
    """Every point of a tag as a dict with ``step``, ``wall`` and its kind's fields.

    Scalars: ``value``. Histograms: ``min``, ``max``, ``num``, ``sum``,
    ``sum_squares``, ``limits``, ``counts``. Images: ``blob`` (id of the PNG),
    ``height``, ``width``, ``channels``. Text: ``text``. Other kinds: the
    fields :mod:`memostore.metrics.event_kinds` lists.
    """
    entry = _entry(store, logs_id, tag)
    kind = entry["kind"]
    events: list[dict[str, Any]] = []
    for data, wall in _chunks(store, entry):
        steps = data["steps"].tolist()
        walls = wall.tolist()
        if kind == "scalar":
            for s, w, v in zip(steps, walls, data["values"].tolist(), strict=True):
                events.append({"step": s, "wall": w, "value": v})
        elif kind == "text":
            for s, w, t in zip(steps, walls, data["texts"], strict=True):
                events.append({"step": s, "wall": w, "text": t})
        elif kind == "image":
            for s, w, (blob, h, wd, c) in zip(steps, walls, data["images"], strict=True):
                events.append(
                    {"step": s, "wall": w, "blob": blob, "height": h, "width": wd, "channels": c}
                )
        elif kind == "histogram":
            stats = data["stats"].reshape(-1, 5)
            offsets = data["offsets"]
            for i, (s, w) in enumerate(zip(steps, walls, strict=True)):
                a, z = int(offsets[i]), int(offsets[i + 1])
                mn, mx, num, total, squares = stats[i].tolist()
                events.append(
                    {
                        "step": s,
                        "wall": w,
                        "min": mn,
                        "max": mx,
                        "num": num,
                        "sum": total,
                        "sum_squares": squares,
                        "limits": data["limits"][a:z].tolist(),
                        "counts": data["counts"][a:z].tolist(),
                    }
                )
        else:
            events.extend(decode_events(kind, data, wall))
    return events


def sparkline(values: Any, width: int = 20) -> str:
    """A one-line sketch of a series with block characters (``▁▂▃▄▅▆▇█``).

    The series is cut into *width* equal runs of points; each character is the
    mean of its run's finite values (a blank when it has none). A series whose
    range is below a millionth of its magnitude (a constant, give or take the
    rounding of the means) is drawn flat.
    """
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if data.size == 0 or width <= 0:
        return ""
    width = min(width, data.size)
    edges = np.linspace(0, data.size, width + 1).astype(np.int64)
    finite = np.isfinite(data)
    sums = np.add.reduceat(np.where(finite, data, 0.0), edges[:-1])
    counts = np.add.reduceat(finite.astype(np.int64), edges[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    known = counts > 0
    if not known.any():
        return " " * width
    lo, hi = means[known].min(), means[known].max()
    span = hi - lo
    # Averaging a constant series leaves rounding noise between runs; stretched to
    # full height it would draw a wave. Below float32's resolution, it is flat.
    flat = not span > _FLAT * max(abs(lo), abs(hi))
    chars = []
    for mean, ok in zip(means.tolist(), known.tolist(), strict=True):
        if not ok:
            chars.append(" ")
        elif flat or not np.isfinite(span):
            chars.append(_BARS[len(_BARS) // 2 - 1])
        else:
            level = int((mean - lo) / span * (len(_BARS) - 1) + 0.5)
            chars.append(_BARS[min(max(level, 0), len(_BARS) - 1)])
    return "".join(chars)


def tag_sparkline(store: Store, logs_id: str, tag: str, width: int = 20) -> str:
    """:func:`sparkline` of a scalar or histogram tag; empty for images and text."""
    try:
        return sparkline(load_series(store, logs_id, tag)[1], width)
    except ValueError:
        return ""
