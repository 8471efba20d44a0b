"""The kinds of non-scalar points, and how each kind's points become columns and back.

A point other than a scalar is journaled as one JSON event with ``kind``,
``tag``, ``step``, ``wall`` and its kind's fields; sealing packs a tag's
events into column chunks (:mod:`.columns`) and reading unpacks them into
the same dicts. Big payloads (images, audio clips, graphs, tensors, mesh
parts, embedding matrices) are stored as blobs when logged and the events
hold their ids, so equal payloads are stored once.

Kinds and their fields (``docs/format.md`` has the chunk layouts):

* ``text``: ``text``.
* ``histogram``: ``min``, ``max``, ``num``, ``sum``, ``sum_squares``, ``limits``, ``counts``.
* ``image``: ``blob`` (PNG), ``height``, ``width``, ``channels``.
* ``video``: ``blob`` (GIF), ``height``, ``width``, ``channels``.
* ``audio``: ``blob`` (WAV), ``sample_rate``, ``channels``, ``frames``, ``content_type``.
* ``pr_curve``: ``thresholds``, ``data`` (six rows: tp, fp, tn, fn, precision, recall).
* ``mesh``: ``config`` (JSON text), ``components`` (bitmask), ``parts``
  (``[content type, blob of float32, shape]`` per part).
* ``tensor``: ``dtype``, ``field``, ``shape``, ``layout`` (NumPy type of the
  blob's values), ``blob``.
* ``custom_scalars``: ``layout`` (``[[category, [[title, type, tags]]]]``).
* ``graph``: ``blob`` (a serialized ``GraphDef``), ``run_metadata`` (blob or None),
  and from ``add_graph`` ``parameters`` (``[[name, shape, dtype, role], ...]``), kept in
  a column of its own that readers without it skip.
* ``embedding``: ``blob`` (the matrix), ``layout``, ``shape``, ``metadata``
  (blob of the TSV or None), ``sprite`` (PNG blob or None), ``sprite_dim``.

Nothing in this module performs I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Tag kinds kept as events (scalars have their own columns).
TAG_KINDS = (
    "text",
    "histogram",
    "image",
    "video",
    "audio",
    "pr_curve",
    "mesh",
    "tensor",
    "custom_scalars",
    "graph",
    "embedding",
)
# Tags of kinds that TensorBoard itself names (no user tag).
GRAPH_TAG = "__graph__"
CUSTOM_SCALARS_TAG = "custom_scalars__config__"
# An event recording that a scalar tag is written in TensorBoard's tensor form.
SCALAR_STYLE = "scalar_style"

_STATS = ("min", "max", "num", "sum", "sum_squares")
# Kinds stored as one JSON row per point: column name and fields, in row order.
_ROWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "image": ("images", ("blob", "height", "width", "channels")),
    "video": ("videos", ("blob", "height", "width", "channels")),
    "audio": ("audio", ("blob", "sample_rate", "channels", "frames", "content_type")),
    "mesh": ("meshes", ("config", "components", "parts")),
    "tensor": ("tensors", ("dtype", "field", "shape", "layout", "blob")),
    "custom_scalars": ("layouts", ("layout",)),
    "graph": ("graphs", ("blob", "run_metadata")),
    "embedding": ("embeddings", ("blob", "layout", "shape", "metadata", "sprite", "sprite_dim")),
}
_BLOB_FIELDS = {"graph": ("blob", "run_metadata"), "embedding": ("blob", "metadata", "sprite")}


def event_blobs(event: dict[str, Any]) -> Iterator[str]:
    """The ids of the blobs an event refers to (what its logs document must link)."""
    kind = event.get("kind")
    for name in _BLOB_FIELDS.get(kind, ("blob",)):
        blob = event.get(name)
        if isinstance(blob, str):
            yield blob
    if kind == "mesh":
        for part in event.get("parts", ()):
            yield part[1]


def event_columns(kind: str, events: list[dict[str, Any]]) -> dict[str, tuple[str, Any]]:
    """The columns of one chunk of a tag's *events* (all of *kind*)."""
    import numpy as np  # here, not above: listing runs (the CLI's log) needs none

    steps = ("i8", np.array([e["step"] for e in events], dtype=np.int64))
    if kind == "text":
        return {"steps": steps, "texts": ("json", [e["text"] for e in events])}
    if kind in _ROWS:
        column, fields = _ROWS[kind]
        columns = {"steps": steps, column: ("json", [[e[f] for f in fields] for e in events])}
        if kind == "graph" and any("parameters" in e for e in events):
            columns["parameters"] = ("json", [e.get("parameters") for e in events])
        return columns
    if kind == "pr_curve":
        data = [np.asarray(e["data"], dtype=np.float64).reshape(-1) for e in events]
        return {
            "steps": steps,
            "thresholds": ("i8", np.array([e["thresholds"] for e in events], dtype=np.int64)),
            "offsets": ("i8", np.cumsum([0] + [len(d) for d in data], dtype=np.int64)),
            "data": ("f8", np.concatenate(data)),
        }
    if kind != "histogram":
        raise ValueError(f"no column layout for points of kind {kind!r}")
    stats = np.array([[float(e[s]) for s in _STATS] for e in events], dtype=np.float64)
    offsets = np.cumsum([0] + [len(e["limits"]) for e in events], dtype=np.int64)
    limits = np.array([x for e in events for x in e["limits"]], dtype=np.float64)
    counts = np.array([x for e in events for x in e["counts"]], dtype=np.float64)
    return {
        "steps": steps,
        "stats": ("f8", stats.reshape(-1)),
        "offsets": ("i8", offsets),
        "limits": ("f8", limits),
        "counts": ("f8", counts),
    }


def decode_events(kind: str, data: dict[str, Any], walls: Any) -> list[dict[str, Any]]:
    """The points of one chunk (its decoded columns and wall times), as dicts.

    Each dict has ``step``, ``wall`` and the kind's fields; a PR curve's
    ``data`` is a ``(6, thresholds)`` float64 array. Histograms and text are
    read by :func:`.read.load_events`; an unknown kind gives no points.
    """
    steps = data["steps"].tolist()
    walls = walls.tolist()
    out: list[dict[str, Any]] = []
    if kind in _ROWS:
        column, fields = _ROWS[kind]
        for s, w, row in zip(steps, walls, data[column], strict=True):
            out.append({"step": s, "wall": w, **dict(zip(fields, row, strict=True))})
        extra = data.get("parameters") if kind == "graph" else None
        if isinstance(extra, list) and len(extra) == len(out):
            for event, parameters in zip(out, extra, strict=True):
                if parameters is not None:
                    event["parameters"] = parameters
    elif kind == "pr_curve":
        offsets = data["offsets"]
        for i, (s, w) in enumerate(zip(steps, walls, strict=True)):
            a, z = int(offsets[i]), int(offsets[i + 1])
            out.append(
                {
                    "step": s,
                    "wall": w,
                    "thresholds": int(data["thresholds"][i]),
                    "data": data["data"][a:z].reshape(6, -1),
                }
            )
    return out
