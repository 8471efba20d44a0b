"""Helpers shared by the benchmark scripts: repeated timing and ratio reporting."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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


def report(
    name: str, ours: float, theirs: float, baseline: str, target: str, unit: str = "s"
) -> dict:
    """Print one comparison line and return it as a record for docs/benchmarks.md."""
    ratio = ours / theirs if theirs else float("inf")
    scale = 1e6 if unit == "us" else 1.0
    print(
        f"{name}: memostore {ours * scale:.4g} {unit}, {baseline} {theirs * scale:.4g} {unit}, "
        f"ratio {ratio:.3f} (target {target})"
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
