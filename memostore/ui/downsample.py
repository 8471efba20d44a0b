"""Reducing a long series to what a chart of a given width can show.

A chart of W pixels cannot show more than W columns of points. Cutting the
visible x window into W buckets and keeping, per bucket, the first, the
lowest, the highest and the last point keeps every spike (a one-point peak is
its bucket's max) and the shape of the line between buckets, at most 4 W
points whatever the length of the series. Points are kept as they were
logged (real steps and values), so hovering shows logged values. A NaN or an
infinity is kept too (the chart marks it and breaks its line there, as
TensorBoard does), at most one of each per bucket.

Smoothing runs on the whole series before it is reduced, so a zoomed window
shows the same smoothed line as the full view.
"""

from __future__ import annotations

import math

import numpy as np

# Windows with at most this many points per bucket are sent whole.
_WHOLE_FACTOR = 4


def window_indices(x: np.ndarray, y: np.ndarray, x0: float, x1: float, buckets: int) -> np.ndarray:
    """Indices of the points of a series to draw in the window [x0, x1].

    Args:
        x: x coordinates, in logged order (steps or times; need not be sorted).
        y: values (a non-finite one is kept: the chart marks it).
        x0: left edge of the window (inclusive).
        x1: right edge (inclusive).
        buckets: number of buckets (the chart's width in pixels).

    Returns:
        Sorted int64 indices into *x*/*y*: every point in the window when there
        are at most ``4 * buckets``; else first, min, max and last of each bucket,
        plus the nearest point outside each edge, so the line enters the window,
        and the NaN and infinities in the window (the first of a kind per bucket
        when there are more than ``4 * buckets``).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    order = None if x.size < 2 or bool(np.all(x[1:] >= x[:-1])) else np.argsort(x, kind="stable")
    xs = x if order is None else x[order]
    ys = y if order is None else y[order]
    lo = int(np.searchsorted(xs, x0, side="left"))
    hi = int(np.searchsorted(xs, x1, side="right"))
    edges = [i for i in (lo - 1, hi) if 0 <= i < xs.size]
    inside = np.arange(lo, hi, dtype=np.int64)
    finite = np.isfinite(ys[lo:hi])
    marks, inside = inside[~finite], inside[finite]
    many = _WHOLE_FACTOR * max(1, buckets)
    if inside.size > many and x1 > x0:
        inside = _bucket_extremes(xs[inside], ys[inside], x0, x1, buckets, inside)
    if marks.size > many and x1 > x0:
        # One mark per kind (NaN, +inf, -inf) and bucket: the chart cannot show more.
        kind = np.where(np.isnan(ys[marks]), 0, np.where(ys[marks] > 0, 1, 2))
        bucket = np.minimum(
            ((xs[marks] - x0) * (buckets / (x1 - x0))).astype(np.int64), buckets - 1
        )
        _, first = np.unique(bucket * 4 + kind, return_index=True)
        marks = marks[first]
    keep = np.union1d(np.union1d(inside, marks), np.asarray(edges, dtype=np.int64))
    return keep if order is None else np.sort(order[keep])


def _bucket_extremes(
    xs: np.ndarray, ys: np.ndarray, x0: float, x1: float, buckets: int, where: np.ndarray
) -> np.ndarray:
    """First, argmin, argmax and last of each bucket, as indices taken from *where*."""
    bucket = _bucket_of(xs, x0, x1, buckets)
    # xs is sorted, so each bucket is a contiguous run.
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], xs.size] - 1
    counts = ends - starts + 1
    mins = np.minimum.reduceat(ys, starts)
    maxs = np.maximum.reduceat(ys, starts)
    first_min = _first_from(starts, ys == np.repeat(mins, counts))
    first_max = _first_from(starts, ys == np.repeat(maxs, counts))
    picked = np.unique(np.concatenate([starts, ends, first_min, first_max]))
    return where[picked]


def _bucket_of(xs: np.ndarray, x0: float, x1: float, buckets: int) -> np.ndarray:
    """The bucket (column) of each x of the window [x0, x1] cut in *buckets*."""
    return np.minimum(((xs - x0) * (buckets / (x1 - x0))).astype(np.int64), buckets - 1)


def _first_from(starts: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The first index at or after each bucket's start where *mask* holds.

    Every bucket holds its own min and max, so that index lies in the bucket:
    a search in the sorted hits, no sort.
    """
    hits = np.flatnonzero(mask)
    return hits[np.searchsorted(hits, starts)]


def time_weighted_ema(x: np.ndarray, y: np.ndarray, weight: float) -> np.ndarray:
    """An EMA whose decay follows the x gaps: a gap g decays by ``weight ** (g / mean gap)``.

    For evenly spaced points it is TensorBoard's debiased EMA; a long pause in
    wall time forgets more of the past than a short one. Non-finite values keep
    their value and do not move the average.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    out = ys.copy()
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    finite = np.isfinite(ys) & np.isfinite(xs)
    idx = np.flatnonzero(finite)
    if weight == 0.0 or idx.size < 2:
        return out
    fx, fy = xs[idx], ys[idx]
    gaps = np.abs(np.diff(fx))
    mean_gap = float(gaps.mean()) or 1.0
    decays = np.r_[weight, weight ** (gaps / mean_gap)].tolist()
    value, norm = 0.0, 0.0
    smoothed = []
    # A plain loop: the recurrence has a coefficient per point (no closed cumulative form
    # that stays finite for long pauses); about 0.3 s per million points.
    for decay, v in zip(decays, fy.tolist(), strict=True):
        value = value * decay + (1.0 - decay) * v
        norm = norm * decay + (1.0 - decay)
        smoothed.append(value / norm if norm > 0 else v)
    out[idx] = smoothed
    return out


def smooth(x: np.ndarray, y: np.ndarray, mode: str, weight: float) -> np.ndarray:
    """*y* smoothed: ``none``, ``ema`` (TensorBoard's) or ``tw-ema`` (time-weighted)."""
    if mode == "none" or weight <= 0.0 or y.size == 0:
        return y
    if mode == "ema":
        from ..metrics.plot import ema_smooth

        return ema_smooth(y, weight)
    if mode == "tw-ema":
        return time_weighted_ema(x, y, weight)
    raise ValueError(f"unknown smoothing {mode!r}; use none, ema or tw-ema")


def finite_range(x: np.ndarray) -> tuple[float, float] | None:
    """(min, max) of the finite values of *x*, None if it has none."""
    ok = x[np.isfinite(x)]
    if not ok.size:
        return None
    return float(ok.min()), float(ok.max())


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def json_values(values: np.ndarray) -> list[float | str]:
    """Logged values for JSON: NaN and infinities as ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (JSON has no such numbers; JavaScript's ``Number()`` reads
    these strings back), so a diverging run is shown as one, not as a gap."""
    if bool(np.isfinite(values).all()):
        return values.tolist()
    return [v if math.isfinite(v) else _NON_FINITE[str(v)] for v in values.tolist()]


def json_floats(values: np.ndarray) -> list[float | None]:
    """Values for JSON: NaN and infinities become None (JSON has no such numbers)."""
    if bool(np.isfinite(values).all()):
        return values.tolist()
    return [v if math.isfinite(v) else None for v in values.tolist()]
