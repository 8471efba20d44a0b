"""What the evaluation page draws of the kinds beyond scalars: PR curves and embeddings.

Values come from the logs alone: a PR curve's six rows are stored in its
column chunk; an embedding's matrix is a blob of raw numbers whose NumPy type
and shape the point records, so it is read with ``numpy.frombuffer`` (never
unpickled, never decoded by a codec) and projected to two dimensions here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .downsample import json_floats

# The projection of an embedding draws at most this many points (evenly taken).
MAX_POINTS = 5000
# NumPy type kinds an embedding matrix may have (what add_embedding accepts).
_NUMERIC_KINDS = "biufc"
_MAX_LABEL = 200


def pr_curve_point(event: dict[str, Any]) -> dict[str, Any]:
    """One PR curve point for JSON: its step and precision and recall per threshold.

    A stored curve's ``data`` holds six rows: true and false positives, true and
    false negatives, precision, recall.
    """
    data = np.asarray(event["data"], dtype=np.float64).reshape(6, -1)
    return {
        "step": event["step"],
        "wall": event["wall"],
        "thresholds": int(event["thresholds"]),
        "precision": json_floats(data[4]),
        "recall": json_floats(data[5]),
        "tp": json_floats(data[0]),
        "fp": json_floats(data[1]),
    }


def embedding_matrix(event: dict[str, Any], data: bytes) -> np.ndarray:
    """The ``(N, D)`` matrix of an embedding point from its blob's bytes.

    Raises:
        ValueError: the recorded type is not numeric, or the shape does not match the bytes.
    """
    layout, shape = event.get("layout"), event.get("shape")
    try:
        dtype = np.dtype(str(layout))
    except TypeError as exc:
        raise ValueError(f"embedding type {layout!r} is not a NumPy type") from exc
    if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"embedding type {layout!r} is not numeric")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(n, int) for n in shape)):
        raise ValueError(f"embedding shape {shape!r} is not (points, dimensions)")
    points, dims = shape
    if points * dims * dtype.itemsize != len(data):
        raise ValueError(f"embedding blob of {len(data)} bytes does not hold {shape} {dtype}")
    matrix = np.frombuffer(data, dtype=dtype).reshape(points, dims)
    return np.real(matrix).astype(np.float64)


def labels_of(tsv: bytes | None, points: int) -> tuple[list[str] | None, str | None]:
    """(one label per point, the header's first column) from a metadata TSV, or (None, None).

    The first column labels a point. The file has one line per point, plus a
    header line when the writer was given a header.
    """
    if tsv is None:
        return None, None
    lines = tsv.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = None
    if len(lines) == points + 1:
        header, lines = lines[0].split("\t")[0], lines[1:]
    if len(lines) != points:
        return None, None
    return [line.split("\t")[0][:_MAX_LABEL] for line in lines], header


def projection(matrix: np.ndarray) -> dict[str, Any]:
    """The first two principal components of *matrix*'s rows (PCA by SVD).

    Returns:
        ``{"x", "y", "index", "explained"}``: the coordinates of at most
        MAX_POINTS rows (``index``: which rows, evenly spaced), and the share
        of the variance each axis explains.
    """
    points = matrix.shape[0]
    index = np.arange(points)
    if points > MAX_POINTS:
        index = np.linspace(0, points - 1, MAX_POINTS).round().astype(np.int64)
    rows = matrix[index]
    finite = np.isfinite(rows).all(axis=1)
    rows, index = rows[finite], index[finite]
    centred = rows - rows.mean(axis=0) if rows.size else rows
    coords = np.zeros((rows.shape[0], 2))
    explained = [0.0, 0.0]
    if rows.shape[0] >= 2 and rows.shape[1] >= 1:
        _, singular, vt = np.linalg.svd(centred, full_matrices=False)
        take = min(2, vt.shape[0])
        coords[:, :take] = centred @ vt[:take].T
        variance = singular**2
        total = float(variance.sum())
        if total > 0:
            explained = [float(v / total) for v in variance[:2]] + [0.0] * (2 - take)
    return {
        "x": json_floats(coords[:, 0]),
        "y": json_floats(coords[:, 1]),
        "index": index.tolist(),
        "explained": explained[:2],
    }
