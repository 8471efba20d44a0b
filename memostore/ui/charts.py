"""The series of the dashboard's charts: read, smoothed and reduced per run, and kept.

A chart asks for one tag of many runs at once (``/api/chart``). Each run's
series is read (a sealed evaluation's column chunks, a running one's journal),
smoothed, and reduced to the chart's width (:mod:`.downsample`), the runs in
parallel: decompressing chunks releases the interpreter. Sealed logs never
change, so both what was read and what was sent are kept: the series read
(steps, values, wall times) in a cache bounded in bytes, and each run's
reduced answer to a whole-series request (no zoom window, no ``after``),
encoded, under its parameters; a page opened again, or by a second reader,
costs no reading, no reduction and no encoding. When the server starts, the
series of the table's first page are read before a chart asks for them (as
TensorBoard loads its runs when it starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MemostoreError
from .downsample import finite_range, json_floats, json_values, smooth, window_indices
from .queries import BadRequest, check_id

if TYPE_CHECKING:
    from .queries import Catalog

X_MODES = ("step", "wall", "relative")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
# Series kept as read: at most this many, holding at most this many bytes.
_SERIES_CACHE = 512
_SERIES_BYTES = 256 << 20
# Reduced answers kept: each is at most 4 points per pixel column of one chart.
_REDUCED_CACHE = 4096
_REDUCED_BYTES = 128 << 20
_WORKERS = max(1, min(8, os.cpu_count() or 1))
_COLUMNS = tuple(2**k for k in range(4, 13))  # 16 ... 4096
# The request the runs page makes first (TensorBoard's default smoothing), prepared ahead.
_FIRST_REQUEST = ("step", "ema", 0.6, None, 1024)

Series = tuple[np.ndarray, np.ndarray, np.ndarray]


def _empty() -> Series:
    return np.empty(0, "<i8"), np.empty(0, "<f8"), np.empty(0, "<f8")


def _x_of(steps: np.ndarray, walls: np.ndarray, mode: str) -> np.ndarray:
    if mode == "step":
        return steps.astype(np.float64)
    if mode == "wall" or not walls.size:
        return walls.astype(np.float64)
    return walls.astype(np.float64) - float(np.nanmin(walls))


def columns_for(width: int) -> int:
    """The columns a whole series is reduced to for a chart *width* pixels wide.

    The next power of two from 16 to 4096 (at most 5000 beyond): a few more
    points than pixels, and answers that charts of similar widths share, so
    the server can keep them and prepare the common one before the page asks.
    """
    for columns in _COLUMNS:
        if width <= columns:
            return columns
    return min(width, 5000)


class _Answer:
    """One run's part of a chart, kept as the JSON it is sent as (lists of floats are big)."""

    __slots__ = ("encoded", "id")

    def __init__(self, body: dict[str, Any]) -> None:
        self.id: str = body["id"]
        self.encoded = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


class Charts:
    """The charts' data over a :class:`.queries.Catalog`; safe to share between threads."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._series: OrderedDict[tuple[str, str], Series] = OrderedDict()
        self._bytes = 0
        self._reduced_bytes = 0
        self._loading: dict[tuple[str, str], threading.Event] = {}
        self._reduced: OrderedDict[tuple[Any, ...], _Answer] = OrderedDict()
        self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="memostore-ui-series")

    def series(self, run: str, tag: str) -> Series:
        """``(steps, values, walltimes)`` of one tag of a recorded or running evaluation.

        Raises:
            BadRequest: the id is malformed, names nothing, or the tag holds no numbers.
        """
        check_id(run)
        catalog = self.catalog
        if _RUN_ID.match(run):
            logs = catalog.live_logs(run)
            if logs is None:
                catalog.running()  # a run started since the last listing
                logs = catalog.live_logs(run)
            if logs is None:
                raise BadRequest(f"no running evaluation {run[:12]}", 404)
            with catalog.lock:
                logs.poll()
                try:
                    return logs.series(tag)
                except KeyError:
                    return _empty()
                except ValueError as exc:
                    raise BadRequest(str(exc)) from exc
        key = (run, tag)
        for _ in range(3):
            with self._lock:
                if key in self._series:
                    self._series.move_to_end(key)
                    return self._series[key]
                loading = self._loading.get(key)
                if loading is None:
                    loading = self._loading[key] = threading.Event()
                    break
            # Another thread (the warm-up, or another chart) reads it now: wait for it.
            loading.wait()
        else:
            loading = threading.Event()  # evicted before we could take it: read it ourselves
        try:
            series = self._read(run, tag)
            with self._lock:
                self._keep(key, series)
            return series
        finally:
            with self._lock:
                if self._loading.get(key) is loading:
                    del self._loading[key]
            loading.set()

    def _read(self, run: str, tag: str) -> Series:
        logs_id = self.catalog.logs_of(run)
        if logs_id is None:
            return _empty()
        from ..metrics.read import load_series

        try:
            return load_series(self.catalog.store, logs_id, tag)
        except KeyError:
            return _empty()
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def _keep(self, key: tuple[str, str], series: Series) -> None:
        """Cache *series* (the lock held), dropping the least recently used past the budget."""
        old = self._series.pop(key, None)
        if old is not None:
            self._bytes -= sum(a.nbytes for a in old)
        self._series[key] = series
        self._bytes += sum(a.nbytes for a in series)
        while len(self._series) > 1 and (
            len(self._series) > _SERIES_CACHE or self._bytes > _SERIES_BYTES
        ):
            _, dropped = self._series.popitem(last=False)
            self._bytes -= sum(a.nbytes for a in dropped)

    def warm(self, rows: list[dict[str, Any]]) -> None:
        """Read the scalar series of *rows* (the table's first page) before a chart asks.

        As TensorBoard loads its runs when it starts: the page opened next finds them
        read, and its first request (:data:`_FIRST_REQUEST`: steps, TensorBoard's
        EMA, a chart up to 1024 pixels wide) answered. Stops at the cache's budget;
        a chart asking meanwhile waits for the series being read instead of reading
        it twice.
        """
        for row in rows:
            if _RUN_ID.match(str(row.get("id"))):
                continue  # a running evaluation is read as it grows, on request
            for tag, stats in (row.get("metrics") or {}).items():
                if stats.get("kind") != "scalar":
                    continue
                with self._lock:
                    full = len(self._reduced) >= _REDUCED_CACHE
                    full = full or self._reduced_bytes >= _REDUCED_BYTES
                if full:
                    return
                with contextlib.suppress(BadRequest, MemostoreError, OSError):
                    self._one(row["id"], tag, _FIRST_REQUEST, {})

    def chart(
        self,
        runs: list[str],
        tag: str,
        *,
        x_mode: str = "step",
        smoothing: str = "none",
        weight: float = 0.0,
        window: tuple[float, float] | None = None,
        buckets: int = 800,
        after: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """One chart's series, reduced to the visible window (see :mod:`.downsample`).

        Args:
            runs: evaluation or run ids.
            tag: the metric tag.
            x_mode: ``step``, ``wall`` (UNIX time) or ``relative`` (seconds since the
                run's first point).
            smoothing: ``none``, ``ema`` or ``tw-ema``; *weight* in [0, 1).
            window: the visible x range; None for everything.
            buckets: the chart's width in pixels (a whole series is reduced to
                :func:`columns_for` it).
            after: per run, the number of points the client holds already: when
                the series is sent whole, only the points after those come back
                (``"append": true``).

        Returns:
            ``{"tag", "series": [{"id", "name", "count", "x", "y", "raw", "steps",
            "start", "rel", "range", "downsampled", "append"}]}``, the series in the
            order of *runs*: ``steps`` the points' steps (left out on a step axis,
            where ``x`` holds them), ``y`` is what the line draws (smoothed, when asked),
            ``raw`` the logged values at the same points (only when smoothed),
            ``start`` the wall time of the run's first point and ``rel`` each
            point's wall time less ``start``, in seconds rounded to milliseconds.
            The points are picked on the logged values (a spike is kept); a NaN
            or infinity is sent as the string ``"NaN"``, ``"Infinity"`` or
            ``"-Infinity"`` in ``y`` and ``raw``.
        """
        return json.loads(
            self.chart_json(
                runs,
                tag,
                x_mode=x_mode,
                smoothing=smoothing,
                weight=weight,
                window=window,
                buckets=buckets,
                after=after,
            )
        )

    def chart_json(self, runs: list[str], tag: str, **settings: Any) -> bytes:
        """:meth:`chart` as the JSON ``/api/chart`` sends; a sealed run's part is encoded once."""
        found = self._answers(runs, tag, **settings)
        # One join of views of the kept encodings: a chart of 100 long runs is megabytes,
        # copied once.
        parts: list[bytes | memoryview] = [b'{"tag":', json.dumps(tag).encode(), b',"series":[']
        for i, answer in enumerate(found):
            name = json.dumps(self.catalog.name_of(answer.id)).encode()
            if i:
                parts.append(b",")
            parts += [memoryview(answer.encoded)[:-1], b',"name":', name, b"}"]
        parts.append(b"]}")
        return b"".join(parts)

    def _answers(
        self,
        runs: list[str],
        tag: str,
        x_mode: str = "step",
        smoothing: str = "none",
        weight: float = 0.0,
        window: tuple[float, float] | None = None,
        buckets: int = 800,
        after: Mapping[str, int] | None = None,
    ) -> list[_Answer]:
        if x_mode not in X_MODES:
            raise BadRequest(f"x must be one of {', '.join(X_MODES)}")
        buckets = max(10, min(int(buckets), 5000))
        if window is None:
            buckets = columns_for(buckets)
        settings = (x_mode, smoothing, float(weight), window, buckets)
        held = after or {}
        # Answers kept are taken here; only the others go to the pool.
        found: dict[str, _Answer | None] = {}
        with self._lock:
            for run in runs:
                key = (run, tag, *settings)
                kept = None if run in held else self._reduced.get(key)
                if kept is not None:
                    self._reduced.move_to_end(key)
                found[run] = kept
        missing = [r for r, a in found.items() if a is None]
        if len(missing) > 1:
            computed = self._pool.map(lambda r: self._one(r, tag, settings, held), missing)
            found.update(zip(missing, computed, strict=True))
        elif missing:
            found[missing[0]] = self._one(missing[0], tag, settings, held)
        return [found[r] for r in runs]  # type: ignore[misc]

    def _one(
        self, run: str, tag: str, settings: tuple[Any, ...], after: Mapping[str, int]
    ) -> _Answer:
        x_mode, smoothing, weight, window, buckets = settings
        # A sealed evaluation's answer to a whole-series request never changes.
        sealed = not _RUN_ID.match(run) and window is None and run not in after
        key = (run, tag, *settings)
        if sealed:
            with self._lock:
                cached = self._reduced.get(key)
                if cached is not None:
                    self._reduced.move_to_end(key)
                    return cached
        steps, values, walls = self.series(run, tag)
        x = _x_of(steps, walls, x_mode)
        y = smooth(x, values, smoothing, weight) if values.size else values
        full = finite_range(x)
        x0, x1 = window if window else (full or (0.0, 0.0))
        # Points are picked on the logged values, so the faded raw line keeps its spikes.
        keep = window_indices(x, values, x0, x1, buckets)
        downsampled = keep.size < np.count_nonzero((x >= x0) & (x <= x1))
        held = after.get(run)
        append = False
        # Appending is exact only for whole, unzoomed series smoothed causally (TensorBoard's
        # EMA at a point depends on the points before it only; the time-weighted one does not).
        causal = smoothing in ("none", "ema")
        if held is not None and not downsampled and causal and window is None:
            keep = np.arange(min(held, x.size), x.size, dtype=np.int64)
            append = True
        shown_steps = steps[keep].tolist()
        finite_walls = walls[np.isfinite(walls)] if walls.size else walls
        start = float(finite_walls.min()) if finite_walls.size else None
        rel = np.round(walls[keep] - start, 3) if start is not None else walls[keep]
        body: dict[str, Any] = {
            "id": run,
            "count": int(x.size),
            # On a step axis x is the steps (sent once, as the integers they are).
            "x": shown_steps if x_mode == "step" else json_floats(x[keep]),
            "y": json_values(y[keep]),
            "start": start,
            "rel": json_floats(rel),
            "range": full,
            "downsampled": bool(downsampled),
            "append": append,
        }
        if x_mode != "step":
            body["steps"] = shown_steps
        if y is not values:
            body["raw"] = json_values(values[keep])
        answer = _Answer(body)
        if sealed:
            with self._lock:
                old = self._reduced.pop(key, None)
                self._reduced_bytes -= len(old.encoded) if old is not None else 0
                self._reduced[key] = answer
                self._reduced_bytes += len(answer.encoded)
                while len(self._reduced) > _REDUCED_CACHE or self._reduced_bytes > _REDUCED_BYTES:
                    _, dropped = self._reduced.popitem(last=False)
                    self._reduced_bytes -= len(dropped.encoded)
        return answer
