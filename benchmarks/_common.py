"""Helpers shared by the benchmark scripts: repeated timing and result lines.

Every measurement that has a target in the issues is printed twice: once for
people (one readable line) and once for ``run_all.py`` as a machine-readable
line ``RESULT {json}`` with the fields of :func:`result`.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

# How a result is judged against its target:
#   "max"   ratio = ours / baseline, met when ratio <= limit (e.g. "<= 1.3x cp -r")
#   "min"   ratio given by the caller (a throughput ratio), met when ratio >= limit
#   "below" an absolute value in *unit*, met when ours < limit (e.g. "< 1 s")
#   "info"  no target of its own: a supporting measurement
KINDS = ("max", "min", "below", "info")


def median_time(
    fn: Callable[[], object], repeat: int = 5, setup: Callable[[], object] | None = None
) -> float:
    """Median wall time of *fn* over *repeat* runs (each after *setup*, untimed)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rotate(candidates: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median seconds of each candidate, run in rotation (one of each per round).

    Rotating, rather than timing one candidate's runs back to back, spreads the
    load of other processes on a shared machine over all candidates alike.
    """
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _format_target(kind: str, limit: float, unit: str, baseline_name: str) -> str:
    if kind == "max":
        return f"<= {limit:g}x {baseline_name}".strip()
    if kind == "min":
        return f">= {limit:g}x {baseline_name}".strip()
    if kind == "below":
        if unit == "ms" and limit >= 1000:
            return f"< {limit / 1000:g} s"
        return f"< {limit:g} {unit}"
    return ""


def result(
    key: str,
    name: str,
    *,
    ours: float,
    kind: str,
    limit: float = math.nan,
    baseline: float | None = None,
    baseline_name: str = "",
    unit: str = "s",
    ratio: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Print one ``RESULT {json}`` line for ``run_all.py`` and return the record.

    Args:
        key: Stable identifier of the target (``run_all.TARGETS`` lists them).
        name: What was measured, in words.
        ours: memostore's median, in *unit*.
        kind: How the target reads; one of :data:`KINDS`.
        limit: The target's limit (a ratio for "max"/"min", a value for "below").
        baseline: The alternative's median, in *unit*, when there is one.
        baseline_name: What the alternative is.
        unit: Unit of *ours* and *baseline* ("s", "ms", "us", "MB", ...).
        ratio: The ratio, when it is not ``ours / baseline`` (throughputs).
        note: Anything a reader needs to judge the number.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown result kind {kind!r}")
    if ratio is None and baseline:
        ratio = ours / baseline
    if kind == "max":
        met: bool | None = ratio is not None and ratio <= limit
    elif kind == "min":
        met = ratio is not None and ratio >= limit
    elif kind == "below":
        met = ours < limit
    else:
        met = None
    record = {
        "key": key,
        "name": name,
        "ours": ours,
        "baseline": baseline,
        "baseline_name": baseline_name,
        "unit": unit,
        "ratio": ratio,
        "kind": kind,
        "limit": None if math.isnan(limit) else limit,
        "target": _format_target(kind, limit, unit, baseline_name),
        "met": met,
        "note": note,
    }
    print("RESULT " + json.dumps(record), flush=True)
    return record


def report(
    name: str, ours: float, theirs: float, baseline: str, target: str, unit: str = "s"
) -> dict:
    """Print one readable comparison line and return it as a record."""
    ratio = ours / theirs if theirs else float("inf")
    scale = 1e6 if unit == "us" else 1.0
    print(
        f"{name}: memostore {ours * scale:.4g} {unit}, {baseline} {theirs * scale:.4g} {unit}, "
        f"ratio {ratio:.3f} (target {target})",
        flush=True,
    )
    return {
        "name": name,
        "ours": ours,
        "theirs": theirs,
        "ratio": ratio,
        "baseline": baseline,
        "target": target,
        "unit": unit,
    }
