"""Reading the metrics of an evaluation while it runs, incrementally.

:class:`LiveLogs` follows one journal. Each :meth:`~LiveLogs.poll` reads only
the bytes appended since the previous one (it keeps its offset in the file),
decodes the whole records among them and adds their points to what it holds;
a record still being written is read, whole, by a later poll. Summaries and
series have the shapes :func:`.read.metrics_summary` and
:func:`.read.load_series` give for sealed logs, and tags are named as sealing
will name them (``tag#kind`` for a tag reused for another kind), so a viewer
passes from a running evaluation to its record without a seam.

The reader keeps the journal open: when the evaluation ends and the journal
is removed, the last poll still reads everything that was written to it.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .event_kinds import TAG_KINDS
from .journal import Contents, parse_into
from .runs import NAME_EVENT, RUN_EVENT, evaluation_run, run_records

if TYPE_CHECKING:
    pass

# Largest read per poll: a reader that starts on a long journal catches up in steps.
_READ_MAX = 64 << 20


class _Scalars:
    """The points of one scalar tag and their running statistics."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.count = 0
        self.nan_count = 0
        self.first = self.last = math.nan
        self.min = math.inf
        self.max = -math.inf
        self.step_min = self.step_max = 0
        self._joined: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add(self, steps: bytes, values: bytes, walls: bytes) -> int:
        s = np.frombuffer(steps, dtype="<i8")
        v = np.frombuffer(values, dtype="<f8")
        w = np.frombuffer(walls, dtype="<f8")
        if not len(s):
            return 0
        if not self.count:
            self.first = float(v[0])
            self.step_min, self.step_max = int(s[0]), int(s[0])
        self.last = float(v[-1])
        finite = v[~np.isnan(v)]
        self.nan_count += len(v) - len(finite)
        if len(finite):
            self.min = min(self.min, float(finite.min()))
            self.max = max(self.max, float(finite.max()))
        self.step_min = min(self.step_min, int(s.min()))
        self.step_max = max(self.step_max, int(s.max()))
        self.count += len(s)
        self.parts.append((s, v, w))
        self._joined = None
        return len(s)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._joined is None:
            if not self.parts:
                empty = (np.empty(0, "<i8"), np.empty(0, "<f8"), np.empty(0, "<f8"))
                self._joined = empty
            else:
                # Joined once per change, then kept as the one part: the next join
                # copies the new points and the old array, not every batch again.
                joined = tuple(np.concatenate([p[i] for p in self.parts]) for i in range(3))
                self.parts = [joined]  # type: ignore[list-item]
                self._joined = joined  # type: ignore[assignment]
        assert self._joined is not None
        return self._joined

    def summary(self) -> dict[str, Any]:
        none = self.nan_count == self.count
        return {
            "kind": "scalar",
            "count": self.count,
            "step_min": self.step_min,
            "step_max": self.step_max,
            "nan_count": self.nan_count,
            "first": self.first,
            "last": self.last,
            "min": math.nan if none else self.min,
            "max": math.nan if none else self.max,
        }


class LiveLogs:
    """The metrics of one evaluation in progress, read from its journal as they arrive.

    Args:
        path: the journal (:attr:`.RunningEvaluation.path`).

    Raises:
        FileNotFoundError: the journal is gone (the evaluation has ended: read
            its record instead).

    Example:
        >>> with run.logs() as logs:             # run: a RunningEvaluation
        ...     logs.poll()                      # {"loss": 120}: new points per tag
        ...     steps, values, walls = logs.series("loss")
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_RDONLY)
        self.offset = 0
        self.header: dict[str, Any] | None = None
        self.damaged = False
        self._ended = False
        self._scalars: dict[str, _Scalars] = {}
        self._events: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._hparams: list[dict[str, Any]] = []
        self._declared: list[dict[str, Any]] = []  # runs and their tags' names

    # -- reading ----------------------------------------------------------------------------
    def poll(self) -> dict[str, int]:
        """Read what was appended since the last poll (the first: everything so far).

        Returns:
            The number of new points per tag (empty when nothing arrived).
        """
        fd = self._fd
        if fd is None:
            return {}
        # Looked at before reading: once the writer has removed its journal it
        # writes no more, so this read then gets everything.
        st = os.fstat(fd)
        ended = st.st_nlink == 0
        new: dict[tuple[str, str], int] = {}
        size = st.st_size
        while self.offset < size:
            data = os.pread(fd, min(size - self.offset, _READ_MAX), self.offset)
            if not data:
                break
            contents = Contents()
            used = parse_into(contents, data)
            if used == 0 and len(data) == _READ_MAX:
                # One record longer than a step: read it whole.
                data = os.pread(fd, size - self.offset, self.offset)
                contents = Contents()
                used = parse_into(contents, data)
            self._add(contents, new)
            self.offset += used
            self.damaged = contents.damaged
            if contents.damaged or used == 0:
                break  # a record in progress (or damage): read again from here next time
        if ended:
            self._ended = True
        if not new:
            return {}
        names = {where: name for name, where in self._names().items()}
        return {names[where]: count for where, count in new.items()}

    def _add(self, contents: Contents, new: dict[tuple[str, str], int]) -> None:
        if contents.header is not None and self.header is None:
            self.header = contents.header
        for tag, batches in contents.scalars.items():
            column = self._scalars.get(tag)
            if column is None:
                column = self._scalars[tag] = _Scalars()
            for steps, values, walls in batches:
                added = column.add(steps, values, walls)
                if added:
                    new[(tag, "scalar")] = new.get((tag, "scalar"), 0) + added
        for event in contents.events:
            kind = event.get("kind")
            if kind == "hparams":
                self._hparams.append(event)
            elif kind in (RUN_EVENT, NAME_EVENT):
                self._declared.append(event)
            elif kind in TAG_KINDS and "tag" in event:
                # A tagged point (text, histogram, image, audio, ...), as sealing
                # keeps them; other events (runs, names, styles) are no points.
                where = (str(event["tag"]), kind)
                self._events.setdefault(where, []).append(event)
                new[where] = new.get(where, 0) + 1

    @property
    def ended(self) -> bool:
        """True once the evaluation has ended and its journal was sealed (or recovered)."""
        return self._ended

    def writer_alive(self) -> bool:
        """Whether the process writing the journal may still be running."""
        if self._fd is None or self._ended or self.header is None:
            return False
        from .recover import writer_alive

        return writer_alive(self._fd, self.header, time.time())

    def close(self) -> None:
        """Close the journal (the points read so far stay readable)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> LiveLogs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    # -- what was read ----------------------------------------------------------------------
    def _names(self) -> dict[str, tuple[str, str]]:
        """Tag name (as sealing names it) -> (tag, kind)."""
        names: dict[str, tuple[str, str]] = {
            t: (t, "scalar") for t, c in self._scalars.items() if c.count
        }
        for tag, kind in self._events:
            names[tag if tag not in names else f"{tag}#{kind}"] = (tag, kind)
        return names

    def tags(self) -> list[str]:
        """The tags logged so far, sorted."""
        return sorted(self._names())

    def summary(self) -> dict[str, dict[str, Any]]:
        """Tag -> ``{"kind", "count", "first", "last", "min", "max", "nan_count",
        "step_min", "step_max"}``, as :func:`.read.metrics_summary` gives for sealed logs."""
        out: dict[str, dict[str, Any]] = {}
        for name, (tag, kind) in sorted(self._names().items()):
            if kind == "scalar":
                out[name] = self._scalars[tag].summary()
                continue
            events = self._events[(tag, kind)]
            steps = [int(e.get("step", 0)) for e in events]
            entry: dict[str, Any] = {
                "kind": kind,
                "count": len(events),
                "step_min": min(steps),
                "step_max": max(steps),
                "nan_count": 0,
                "first": None,
                "last": None,
                "min": None,
                "max": None,
            }
            if kind == "histogram":
                entry["min"] = min((float(e["min"]) for e in events), default=math.nan)
                entry["max"] = max((float(e["max"]) for e in events), default=math.nan)
            out[name] = entry
        return out

    def _lookup(self, tag: str) -> tuple[str, str]:
        names = self._names()
        if tag not in names:
            known = ", ".join(sorted(names)) or "none yet"
            raise KeyError(f"no tag {tag!r} in these logs (tags: {known})")
        return names[tag]

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps int64, values float64, walltimes float64)`` of a tag so far.

        A histogram tag gives each histogram's mean. Raises KeyError for a tag
        not logged (yet) and ValueError for an image or text tag.
        """
        name, kind = self._lookup(tag)
        if kind == "scalar":
            return self._scalars[name].arrays()
        if kind != "histogram":
            raise ValueError(f"tag {tag!r} holds {kind} points, not numbers")
        events = self._events[(name, kind)]
        steps = np.array([int(e["step"]) for e in events], dtype="<i8")
        walls = np.array([float(e["wall"]) for e in events], dtype="<f8")
        with np.errstate(divide="ignore", invalid="ignore"):
            means = np.array([float(e["sum"]) for e in events]) / np.array(
                [float(e["num"]) for e in events]
            )
        return steps, means.astype("<f8"), walls

    def events(self, tag: str) -> list[dict[str, Any]]:
        """Every point of a tag so far, as :func:`.read.load_events` gives them."""
        name, kind = self._lookup(tag)
        if kind == "scalar":
            steps, values, walls = self._scalars[name].arrays()
            return [
                {"step": s, "wall": w, "value": v}
                for s, v, w in zip(steps.tolist(), values.tolist(), walls.tolist(), strict=True)
            ]
        return [
            {k: v for k, v in e.items() if k not in ("kind", "tag")}
            for e in self._events[(name, kind)]
        ]

    def runs(self) -> dict[str, Any]:
        """The ``runs`` and ``sessions`` lists declared so far, as sealing will write them."""
        return run_records([*self._declared, *self._hparams])

    def run_name(self, standalone: bool) -> str | None:
        """The TensorBoard run the evaluation is known by (:func:`.runs.evaluation_run`)."""
        return evaluation_run(self._declared, standalone)

    def hparams(self) -> dict[str, Any]:
        """``{"hparams", "metrics", "domains"}`` recorded by ``add_hparams`` so far."""
        hparams: dict[str, Any] = {}
        metrics: list[str] = []
        domains: dict[str, Any] = {}
        for event in self._hparams:
            hparams.update(event.get("hparams") or {})
            metrics.extend(m for m in event.get("metrics") or [] if m not in metrics)
            domains.update(event.get("domains") or {})
        return {"hparams": hparams, "metrics": metrics, "domains": domains}


__all__ = ["LiveLogs"]
