"""What the dashboard shows, read from the store as plain JSON-able data.

Everything comes from the store's listing functions (the refs and the
evaluation index), the logs manifests and the metrics readers; no stored
value is decoded. Sealed logs never change (their id names their content), so
their summaries and series are cached by logs id; an evaluation still running
is read from its journal through one :class:`~memostore.metrics.live.LiveLogs`
per run, polled on each request, so each poll reads only what was appended.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MemostoreError
from .downsample import finite_range, json_floats, smooth, window_indices

if TYPE_CHECKING:
    from ..metrics.live import LiveLogs
    from ..metrics.running import RunningEvaluation
    from ..odb.store import Store

_EVALUATION_ID = re.compile(r"^[0-9a-f]{64}$")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
_SERIES_CACHE = 256
X_MODES = ("step", "wall", "relative")
# Rows of the table's first page (the page size of static/table.js).
FIRST_PAGE = 100


class BadRequest(ValueError):
    """A request names something malformed or absent (answered with status 400 or 404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_id(value: str) -> str:
    """*value* if it is an evaluation id (64 hex digits) or a run id (32); else BadRequest."""
    if not isinstance(value, str) or not (_EVALUATION_ID.match(value) or _RUN_ID.match(value)):
        raise BadRequest(f"not an evaluation or run id: {str(value)[:80]!r}")
    return value


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level, keys joined with dots (as MLflow shows params)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, key + "."))
        elif isinstance(value, (str, int, float, bool)) or value is None:
            out[key] = value
        else:
            out[key] = str(value)
    return out


_MAPPING_TYPES = ("dict", "OrderedDict")


def _is_mapping_summary(summary: Any) -> bool:
    return (
        isinstance(summary, Mapping)
        and summary.get("type") in _MAPPING_TYPES
        and isinstance(summary.get("items"), Mapping)
    )


def _has_mappings(record: Mapping[str, Any]) -> bool:
    """Whether a listed evaluation has a dict argument (its summary line says so)."""
    summary = record.get("args_summary") or {}
    return any(str(text).startswith(_MAPPING_TYPES) for text in summary.values())


def flatten_summary(summary: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A dict argument's value summary as ``prefix + key`` columns (scalars as values)."""
    from ..values.summaries import describe

    out: dict[str, Any] = {}
    for key, item in summary["items"].items():
        name = f"{prefix}{key}"
        if _is_mapping_summary(item):
            out.update(flatten_summary(item, name + "."))
        elif isinstance(item, (str, int, float, bool)) or item is None:
            out[name] = item
        else:
            out[name] = describe(item, width=80)
    return out


def _stats(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The table's statistics of a tag: last, min, max (numbers or None) and count."""
    out: dict[str, Any] = {"count": summary.get("count"), "kind": summary.get("kind")}
    for name in ("last", "min", "max"):
        value = summary.get(name)
        out[name] = value if isinstance(value, (int, float)) and np.isfinite(value) else None
    return out


class Catalog:
    """The store as the dashboard reads it; safe to share between request threads.

    Attributes:
        store: the store.
        lock: held while a journal reader or a cache is used.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self._listing_lock = threading.Lock()
        self._summaries: dict[str, dict[str, Any]] = {}
        self._nested: dict[str, dict[str, Any]] = {}
        self._listed: list[dict[str, Any]] | None = None
        self._listed_token: tuple[Any, ...] | None = None
        self._head_lock = threading.Lock()
        self._head_page: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._series: OrderedDict[tuple[str, str], tuple[np.ndarray, ...]] = OrderedDict()
        self._live: dict[str, LiveLogs] = {}
        self._running: dict[str, RunningEvaluation] = {}

    # -- listing --------------------------------------------------------------------------
    def running(self) -> list[RunningEvaluation]:
        """The evaluations in progress (never recovering: the dashboard writes nothing)."""
        from ..metrics.running import running_evaluations

        found = running_evaluations(self.store, recover=False)
        with self.lock:
            self._running.update({r.run_id: r for r in found})
        return found

    def runs(self) -> dict[str, Any]:
        """Every evaluation as a table row, newest first, and the table's columns.

        Returns:
            ``{"rows", "args", "tags", "complete": true}``: each row has ``id``,
            ``function``, ``status``, ``created``, ``started``, ``duration_s``,
            ``parents``, ``args`` (flattened), ``metrics`` (``{tag: {last, min, max,
            count, kind}}``), ``hits`` and ``last_used``; ``args`` and ``tags``
            list the argument and metric columns.
        """
        from ..errors import RevisionNotFound
        from ..inspect.inspection import log_records

        running = self.running()
        # One listing at a time: a request arriving while another lists waits
        # for it instead of reading every manifest a second time.
        with self._listing_lock:
            token = listing_token(self.store)
            rows = self._listed if token is not None and token == self._listed_token else None
            if rows is None:
                try:
                    records, _ = log_records(self.store)
                except RevisionNotFound:
                    records = []
                rows = [self._row(r, self._summary(r.get("logs"))) for r in records]
                for row, record in zip(rows, records, strict=True):
                    if _has_mappings(record):
                        row["args"] = self._nested_args(record)
                self._listed, self._listed_token = rows, None if _racy(token) else token
        live = [self.running_row(r) for r in running]
        rows = sorted(live + rows, key=lambda r: -(r.get("started") or 0.0))
        _add_usage(self.store, rows)
        return {**_columns(rows), "rows": rows, "complete": True}

    def first_page(self, limit: int) -> dict[str, Any]:
        """The newest *limit* rows, answered before the full listing is read.

        Returns:
            What :meth:`runs` returns (``"complete": true``) when the full listing
            is at hand; else the newest rows the index lists (see :mod:`.head`)
            with ``"complete": false``, ``indexed`` (how many evaluations the index
            holds) and the ``functions`` and ``statuses`` of all of them.
        """
        if self._listing_ready():
            listing = self.runs()
            rows = listing["rows"]
            if len(rows) <= limit:
                return listing
            # Sent whole, 10,000 rows take longer to encode and parse than to list.
            return {
                **_columns(rows[:limit]),
                "rows": rows[:limit],
                "complete": False,
                "indexed": len(rows),
                "functions": sorted({str(r["function"]) for r in rows}),
                "statuses": sorted({str(r["status"]) for r in rows}),
            }
        page = self._head(limit)
        if page is None:
            return self.runs()
        running = self.running()
        rows = [self.running_row(r) for r in running] + page["rows"]
        _add_usage(self.store, rows)
        return {
            **_columns(rows),
            "rows": rows[:limit],
            "complete": False,
            "indexed": page["indexed"] + len(running),
            "functions": sorted({*page["functions"], *(r["function"] for r in rows)}),
            "statuses": sorted({*page["statuses"], *(str(r["status"]) for r in rows)}),
        }

    def _listing_ready(self) -> bool:
        token = self._listed_token
        return token is not None and self._listed is not None and token == listing_token(self.store)

    def _head(self, limit: int) -> dict[str, Any] | None:
        """The first page from the index, kept while the index file is unchanged."""
        from ..odb.index import index_path

        path = index_path(self.store)
        try:
            stat = os.stat(path) if path is not None else None
        except OSError:
            stat = None
        # A removed evaluation leaves its index entry: the refs' times are part of the key.
        token = listing_token(self.store)
        signature = (
            None
            if stat is None or _racy(token)
            else (stat.st_ino, stat.st_size, stat.st_mtime_ns, limit, token)
        )
        with self._head_lock:
            cached = self._head_page
            if signature is not None and cached is not None and cached[0] == signature:
                return cached[1]
            from ..inspect.inspection import log_record
            from .head import newest_from_index

            found = newest_from_index(self.store, limit)
            if found is None:
                return None
            rows = []
            for entry in found["entries"]:
                record = log_record(entry)
                row = self._row(record, self._summary(record.get("logs")))
                if _has_mappings(record):
                    row["args"] = self._nested_args(record)
                rows.append(row)
            page = {**found, "rows": rows}
            if signature is not None:
                self._head_page = (signature, page)
            return page

    def running_row(self, run: RunningEvaluation) -> dict[str, Any]:
        """The table row of an evaluation in progress, with the metrics logged so far."""
        logs = self.live_logs(run.run_id)
        summary: dict[str, Any] = {}
        if logs is not None:
            with self.lock:
                logs.poll()
                summary = logs.summary()
        return self._row(run.record(), summary)

    def _row(self, record: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": record["id"],
            "function": record.get("function"),
            "status": record.get("status"),
            "created": record.get("created"),
            "started": record.get("started"),
            "duration_s": record.get("duration_s"),
            "parents": list(record.get("parents") or []),
            "args": flatten(record.get("args") or {}),
            "metrics": {tag: _stats(s) for tag, s in summary.items()},
        }

    def _nested_args(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments with dict values flattened (``opt.lr``), from their value summaries.

        The index keeps only top-level scalars, so this reads the evaluation's small
        argument documents once (cached: an evaluation never changes).
        """
        evaluation_id = record["id"]
        cached = self._nested.get(evaluation_id)
        if cached is None:
            from ..values.summaries import summarize_arguments

            cached = flatten(record.get("args") or {})
            try:
                args_id = self.store.evaluation(evaluation_id).body.get("args")
                summaries = summarize_arguments(self.store.objects, args_id, False)
            except (MemostoreError, KeyError, ValueError):
                summaries = {}
            for name, summary in summaries.items():
                if _is_mapping_summary(summary):
                    cached.pop(name, None)
                    cached.update(flatten_summary(summary, f"{name}."))
            self._nested[evaluation_id] = cached
        return cached

    def _summary(self, logs_id: str | None) -> dict[str, Any]:
        if not logs_id:
            return {}
        cached = self._summaries.get(logs_id)
        if cached is None:
            from ..inspect.inspection import metrics_of

            cached, _ = metrics_of(self.store, logs_id)
            self._summaries[logs_id] = cached
        return cached

    def warm(self) -> None:
        """Read the table's first page now (on start-up, in a thread).

        Only the first page: the full listing, a second of work for 10,000
        evaluations, is read when the page asks for it, once the first page is
        drawn; read now, it would hold the interpreter while the page loads.
        """
        # An error here is reported by the first request, which reads again.
        with contextlib.suppress(MemostoreError, OSError):
            self.first_page(FIRST_PAGE)

    # -- series ---------------------------------------------------------------------------
    def live_logs(self, run_id: str) -> LiveLogs | None:
        """The journal reader of a running evaluation, opened once and kept (None: not running).

        Poll and read it while holding :attr:`lock`: readers are not thread-safe.
        """
        with self.lock:
            logs = self._live.get(run_id)
            if logs is not None:
                return logs
            run = self._running.get(run_id)
        if run is None:
            return None
        try:
            logs = run.logs()
        except FileNotFoundError:
            return None  # it ended: its record is listed instead
        with self.lock:
            # Kept open: once the run ends, the reader still holds every point it wrote.
            return self._live.setdefault(run_id, logs)

    def logs_of(self, evaluation_id: str) -> str | None:
        """The logs document of a recorded evaluation (None if it logged nothing)."""
        try:
            body = self.store.evaluation(evaluation_id).body
        except (MemostoreError, KeyError) as exc:
            raise BadRequest(f"no evaluation {evaluation_id[:12]}", 404) from exc
        logs = body.get("logs")
        return logs if isinstance(logs, str) else None

    def series(self, run: str, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, values, walltimes)`` of one tag of a recorded or running evaluation.

        Raises:
            BadRequest: the id is malformed, names nothing, or the tag holds no numbers.
        """
        check_id(run)
        if _RUN_ID.match(run):
            if run not in self._running and run not in self._live:
                self.running()
            logs = self.live_logs(run)
            if logs is None:
                raise BadRequest(f"no running evaluation {run[:12]}", 404)
            with self.lock:
                logs.poll()
                try:
                    return logs.series(tag)
                except KeyError:
                    return _empty()
                except ValueError as exc:
                    raise BadRequest(str(exc)) from exc
        key = (run, tag)
        with self.lock:
            if key in self._series:
                self._series.move_to_end(key)
                return self._series[key]  # type: ignore[return-value]
        logs_id = self.logs_of(run)
        if logs_id is None:
            return _empty()
        from ..metrics.read import load_series

        try:
            series = load_series(self.store, logs_id, tag)
        except KeyError:
            series = _empty()
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        with self.lock:
            self._series[key] = series
            while len(self._series) > _SERIES_CACHE:
                self._series.popitem(last=False)
        return series

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
            buckets: the chart's width in pixels.
            after: per run, the number of points the client holds already: when
                the series is sent whole, only the points after those come back
                (``"append": true``).

        Returns:
            ``{"tag", "series": [{"id", "count", "x", "y", "raw", "steps", "start",
            "rel", "range", "downsampled", "append"}]}``: ``y`` is what the line
            draws (smoothed, when asked), ``raw`` the logged values at the same
            points (only when smoothed), ``start`` the wall time of the run's first
            point and ``rel`` each point's wall time less ``start``, in seconds
            rounded to milliseconds (for the tooltip's time columns).
        """
        if x_mode not in X_MODES:
            raise BadRequest(f"x must be one of {', '.join(X_MODES)}")
        buckets = max(10, min(int(buckets), 5000))
        out = []
        for run in runs:
            steps, values, walls = self.series(run, tag)
            x = _x_of(steps, walls, x_mode)
            y = smooth(x, values, smoothing, weight) if values.size else values
            full = finite_range(x)
            x0, x1 = window if window else (full or (0.0, 0.0))
            # Points are picked on the logged values, so the faded raw line keeps its spikes.
            keep = window_indices(x, values, x0, x1, buckets)
            downsampled = keep.size < np.count_nonzero((x >= x0) & (x <= x1))
            held = (after or {}).get(run)
            append = False
            # Appending is exact only for whole, unzoomed series smoothed causally (TensorBoard's
            # EMA at a point depends on the points before it only; the time-weighted one does not).
            causal = smoothing in ("none", "ema")
            if held is not None and not downsampled and causal and window is None:
                keep = np.arange(min(held, x.size), x.size, dtype=np.int64)
                keep = keep[np.isfinite(values[keep])]
                append = True
            start = float(np.nanmin(walls)) if walls.size and np.isfinite(walls).any() else None
            rel = np.round(walls[keep] - start, 3) if start is not None else walls[keep]
            series: dict[str, Any] = {
                "id": run,
                "count": int(x.size),
                "x": json_floats(x[keep]),
                "y": json_floats(y[keep]),
                "steps": steps[keep].tolist(),
                "start": start,
                "rel": json_floats(rel),
                "range": full,
                "downsampled": bool(downsampled),
                "append": append,
            }
            if y is not values:
                series["raw"] = json_floats(values[keep])
            out.append(series)
        return {"tag": tag, "series": out}


def listing_token(store: Store) -> tuple[Any, ...] | None:
    """What changes whenever the set of evaluations refs name changes (None: unknown).

    A ref is created, moved or replaced by renaming a file into its directory,
    which changes that directory's modification time; so the times of the
    directories under ``refs/`` and of the files directly in it (packed refs)
    change with every listing. Reading them costs one ``stat`` per directory,
    not one read per ref.
    """
    if store.root is None:
        return None
    root = str(store.root / "refs")
    found: list[tuple[str, int]] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                found.append((directory, os.stat(directory).st_mtime_ns))
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif directory == root:
                        stat = entry.stat(follow_symlinks=False)
                        found.append((entry.path, stat.st_mtime_ns))
        except OSError:
            found.append((directory, -1))
    return tuple(sorted(found))


# A directory changed this recently may change again within the same tick of its
# file system's clock, leaving its time as it was: such a listing is not reused
# (the "racy" rule of git's index).
_RACY_NS = 2_000_000_000


def _racy(token: tuple[Any, ...] | None) -> bool:
    if token is None:
        return True
    newest = max((mtime for _, mtime in token), default=-1)
    return newest >= time.time_ns() - _RACY_NS


def _add_usage(store: Store, rows: list[dict[str, Any]]) -> None:
    """Set each row's ``hits`` and ``last_used`` from the store's record of use.

    Read per answer, not kept with the cached rows: hits change while the
    listing does not. An evaluation the record does not name was never hit
    since it was stored (or was stored before hits were recorded): 0 hits, last
    used when it started. A running evaluation has neither yet (None).
    """
    from ..lifecycle.last_use import load

    try:
        used = load(store)
    except (OSError, ValueError, MemostoreError):
        used = {}
    for row in rows:
        if row.get("status") == "running":
            row["hits"] = row["last_used"] = None
            continue
        use = used.get(row["id"])
        row["hits"] = use.hits if use is not None else 0
        row["last_used"] = use.last_used if use is not None else row.get("started")


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The table's argument and metric columns of *rows*: ``{"args", "tags"}``."""
    args: dict[str, None] = {}
    tags: dict[str, None] = {}
    for row in rows:
        args.update(dict.fromkeys(row["args"]))
        tags.update(dict.fromkeys(t for t, s in row["metrics"].items() if _numeric(s)))
    return {"args": list(args), "tags": sorted(tags)}


def _empty() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.empty(0, "<i8"), np.empty(0, "<f8"), np.empty(0, "<f8")


def _x_of(steps: np.ndarray, walls: np.ndarray, mode: str) -> np.ndarray:
    if mode == "step":
        return steps.astype(np.float64)
    if mode == "wall" or not walls.size:
        return walls.astype(np.float64)
    return walls.astype(np.float64) - float(np.nanmin(walls))


def _numeric(stats: Mapping[str, Any]) -> bool:
    return stats.get("kind") in ("scalar", "histogram")
