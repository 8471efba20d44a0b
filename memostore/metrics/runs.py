"""Runs: TensorBoard's unit of logging, kept apart inside one evaluation.

In TensorBoard every ``SummaryWriter(log_dir)`` is a *run* (a directory of
event files), and the writer makes sub-runs below it: one per key of
``add_scalars`` (``<log_dir>/<main_tag>_<key>``, tag ``main_tag``) and one per
``add_hparams`` call (``<log_dir>/<run_name>``). memostore keeps every point in
the evaluation it was logged in, so one evaluation may hold several runs.

Each (run, tag) pair gets a *name* in the evaluation's logs, the name ``show``,
``plot`` and the reading functions use:

* the tag itself, unless another run of the evaluation took that name first;
* else ``<label>/<tag>``, where the label is the run's path relative to the
  evaluation's first run when it lies below it (``val`` for a writer on
  ``runs/x/val`` after one on ``runs/x``), else the run's path.

``add_scalars`` names its points ``<main_tag>/<key>`` (prefixed with its
writer's label on a clash), as memostore always has, while exporting them
to the sub-runs torch writes.

The journal records each run once (``{"kind": "run", ...}``) and each name
once (``{"kind": "run_tag", ...}``); sealing (:func:`annotate`) turns them into
the logs document's ``runs`` list and ``sessions`` list::

    "runs": [{"name", "log_dir", "kind": "writer" | "scalars" | "hparams",
              "parent", "dir", "purge_step", "default_dir", "tags": {name: tag}}, ...],
    "sessions": [{"run", "hparams", "metrics": [tag, ...], "names": [name, ...],
                  "domains", "step", "wall"}, ...]

``dir`` is where ``export tensorboard`` writes the run, relative to the
evaluation's directory (``""`` for the first run); ``default_dir`` is true for
a writer given no ``log_dir`` (TensorBoard's ``runs/<date>_<host><comment>``).
Logs sealed before runs existed have neither list: all their points are one run.

:func:`evaluation_run` names the run an evaluation is known by in TensorBoard
(its record's ``run_name``, see :mod:`memostore.records.names`).

Nothing in this module performs I/O except :func:`logged_counts`, which
reads the caller's own journal.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from .journal import Contents, Journal, parse


class _WithState(Protocol):
    """What :func:`registry_for` needs of an evaluation context: its scratch space."""

    state: dict[str, Any]


STATE_KEY = "memostore.metrics.runs"
RUN_EVENT = "run"
NAME_EVENT = "run_tag"
PURGE_EVENT = "purge"
# Journal events that name no tag of their own: never renamed.
UNNAMED_KINDS = frozenset({RUN_EVENT, NAME_EVENT, PURGE_EVENT, "hparams"})


def run_path(log_dir: str | os.PathLike[str]) -> str:
    """The name of the run a writer on *log_dir* makes: its path, normalised, ``/``-separated.

    A path below the working directory is made relative to it, so a run has the
    same name whether the writer was given ``runs/a`` or its absolute path.
    """
    text = os.fspath(log_dir)
    if os.path.isabs(text):
        cwd = os.getcwd()
        inside = os.path.commonpath([cwd, os.path.normpath(text)]) == cwd
        text = os.path.relpath(text, cwd) if inside else os.path.normpath(text)
    else:
        text = os.path.normpath(text)
    return text.replace(os.sep, "/")


@dataclass(frozen=True)
class Run:
    """One run: its name (a path), where its directory is, what made it.

    Attributes:
        name: the run's path, as :func:`run_path` makes it.
        log_dir: the absolute directory (where TensorBoard's writer would write).
        kind: ``writer`` (a SummaryWriter), ``scalars`` (an add_scalars key) or
            ``hparams`` (an add_hparams session).
        parent: the name of the writer's run, for the other two kinds.
        default_dir: the writer was given no ``log_dir`` (it made TensorBoard's default).
    """

    name: str
    log_dir: str
    kind: str = "writer"
    parent: str | None = None
    default_dir: bool = False

    def child(self, sub: str, kind: str) -> Run:
        """The sub-run *sub* below this run (torch joins the paths the same way)."""
        return Run(
            name=posixpath.normpath(f"{self.name}/{sub}"),
            log_dir=os.path.join(self.log_dir, sub),
            kind=kind,
            parent=self.name,
        )


def label(run: str, first: str | None) -> str:
    """Where *run* sits relative to the evaluation's *first* run: ``""`` for that run itself."""
    if first is None or run == first:
        return ""
    if first == ".":
        return run  # every other run is below the working directory's, or outside it
    if run.startswith(first + "/"):
        return run[len(first) + 1 :]
    return run


class RunNames:
    """The runs of one evaluation and the name of each (run, tag) pair in its logs.

    Shared by every writer that logs into the evaluation; thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first: str | None = None
        self._runs: set[str] = set()
        self._claimed: dict[str, tuple[str, str]] = {}  # name -> (run, tag)
        self._names: dict[tuple[str, str], str] = {}  # (run, tag) -> name
        self.by_run: dict[str, list[str]] = {}  # run -> its names, in order

    def declare(self, journal: Journal, run: Run, purge_step: int | None = None) -> None:
        """Record *run* in the journal the first time it logs into this evaluation."""
        with self._lock:
            if run.name in self._runs:
                return
            self._runs.add(run.name)
            if self.first is None:
                self.first = run.name
        event: dict[str, Any] = {
            "kind": RUN_EVENT,
            "run": run.name,
            "log_dir": run.log_dir,
            "run_kind": run.kind,
            "parent": run.parent,
            "step": 0,
            "wall": time.time(),
        }
        if purge_step is not None:
            event["purge_step"] = int(purge_step)
        if run.default_dir:
            event["default_dir"] = True
        journal.add_event(event)

    def name(
        self,
        journal: Journal,
        run: Run,
        tag: str,
        shown: str | None = None,
        owner: Run | None = None,
    ) -> str:
        """The name of *tag* of *run* in these logs, recorded in the journal on first use.

        Args:
            journal: the evaluation's journal.
            run: the run the point belongs to (declared before).
            tag: the tag TensorBoard shows in that run.
            shown: the name wanted (default *tag*): ``main/key`` for add_scalars.
            owner: the run whose label prefixes the name on a clash (default *run*).
        """
        key = (run.name, tag)
        with self._lock:
            name = self._names.get(key)
            if name is not None:
                return name
            wanted = tag if shown is None else shown
            name = wanted
            if name in self._claimed:
                prefix = label((owner or run).name, self.first) or "."
                name = f"{prefix}/{wanted}"
                n = 2
                while name in self._claimed:
                    name = f"{prefix}/{wanted} ({n})"
                    n += 1
            self._claimed[name] = key
            self._names[key] = name
            self.by_run.setdefault(run.name, []).append(name)
        journal.add_event(
            {
                "kind": NAME_EVENT,
                "run": run.name,
                "tag": tag,
                "name": name,
                "step": 0,
                "wall": time.time(),
            }
        )
        return name

    def names_of(self, run: str) -> list[str]:
        """The names *run* has used so far."""
        with self._lock:
            return list(self.by_run.get(run, ()))


def registry_for(ctx: _WithState) -> RunNames:
    """The run names of the evaluation *ctx* (made on first use)."""
    names = ctx.state.get(STATE_KEY)
    if names is None:
        names = ctx.state.setdefault(STATE_KEY, RunNames())
    return names


def journal_contents(journal: Journal) -> Contents:
    """Everything *journal* holds so far (it is flushed first); for the writer's own journal."""
    journal.flush()
    # An in-memory store's journal keeps its records in memory.
    path = journal.path
    return parse(path.read_bytes() if path is not None else bytes(journal._memory or b""))


def logged_counts(journal: Journal, names: Iterable[str]) -> dict[str, int]:
    """How many scalar points of each of *names* the journal holds.

    Used only when a writer with ``purge_step`` joins a run that already
    logged in this evaluation.
    """
    wanted = set(names)
    return {
        tag: sum(len(steps) // 8 for steps, _, _ in batches)
        for tag, batches in journal_contents(journal).scalars.items()
        if tag in wanted
    }


# -- sealing ---------------------------------------------------------------------------------
def annotate(contents: Contents) -> dict[str, Any]:
    """Apply purges to *contents* (in place) and return the ``runs`` and ``sessions`` lists.

    Returns ``{}`` for a journal without runs (``memostore.log`` only, or an
    older writer), so such logs are sealed exactly as before.
    """
    purges = [(i, e) for i, e in enumerate(contents.events) if e.get("kind") == PURGE_EVENT]
    out = run_records(contents.events)
    if out and purges:
        _purge(contents, purges)
    return out


def run_records(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The ``runs`` and ``sessions`` lists that journal *events* declare (``{}``: no runs).

    What sealing writes into the logs document, read from a journal as it is
    (a running evaluation's too: :class:`.live.LiveLogs`).
    """
    runs: dict[str, dict[str, Any]] = {}
    sessions: list[dict[str, Any]] = []
    for event in events:
        kind = event.get("kind")
        if kind == RUN_EVENT:
            runs.setdefault(event["run"], _run_record(event))
        elif kind == NAME_EVENT:
            record = runs.get(event["run"])
            if record is not None:
                record["tags"][event["name"]] = event["tag"]
        elif kind == "hparams" and event.get("run") is not None:
            sessions.append(
                {
                    "run": event["run"],
                    "hparams": event.get("hparams", {}),
                    "metrics": list(event.get("tb_metrics", event.get("metrics", []))),
                    "names": list(event.get("metrics", [])),
                    "domains": event.get("domains") or {},
                    "step": event.get("step", 0),
                    "wall": event.get("wall", 0.0),
                }
            )
    if not runs:
        return {}
    first = next(iter(runs))
    for record in runs.values():
        record["dir"] = label(record["name"], first)
    out: dict[str, Any] = {"runs": list(runs.values())}
    if sessions:
        out["sessions"] = sessions
    return out


def _run_record(event: dict[str, Any]) -> dict[str, Any]:
    record = {
        "name": event["run"],
        "log_dir": event.get("log_dir"),
        "kind": event.get("run_kind", "writer"),
        "parent": event.get("parent"),
        "tags": {},
    }
    if event.get("purge_step") is not None:
        record["purge_step"] = event["purge_step"]
    if event.get("default_dir"):
        record["default_dir"] = True
    return record


def evaluation_run(events: Iterable[dict[str, Any]], standalone: bool) -> str | None:
    """The TensorBoard run an evaluation is known by, from its journal *events*; or None.

    That is its first writer's run: always for a standalone run evaluation
    (TensorBoard shows nothing else for it), and for a memoised call only when
    the writer was given its ``log_dir`` (a default one names the moment the
    writer was made, not the call: the call is named by its arguments).
    """
    for event in events:
        if event.get("kind") != RUN_EVENT or event.get("run_kind", "writer") != "writer":
            continue
        name = event.get("run")
        if not isinstance(name, str):
            return None
        return name if standalone or not event.get("default_dir") else None
    return None


def _purge(contents: Contents, purges: list[tuple[int, dict[str, Any]]]) -> None:
    """Drop the points each purge hides: those logged before it, at or after its step.

    TensorBoard does the same when a restarted writer opens its run with
    ``purge_step``: earlier events at or after that step are not shown.
    """
    import numpy as np

    for tag, batches in list(contents.scalars.items()):
        limits = [(p["counts"].get(tag, 0), p["step"]) for _, p in purges if tag in p["counts"]]
        if not limits:
            continue
        steps = np.frombuffer(b"".join(s for s, _, _ in batches), dtype="<i8")
        values = b"".join(v for _, v, _ in batches)
        walls = b"".join(w for _, _, w in batches)
        keep = np.ones(len(steps), dtype=bool)
        for count, step in limits:
            keep[:count] &= steps[:count] < step
        if keep.all():
            continue
        vals = np.frombuffer(values, dtype="<f8")[keep]
        wall = np.frombuffer(walls, dtype="<f8")[keep]
        contents.scalars[tag] = [(steps[keep].tobytes(), vals.tobytes(), wall.tobytes())]
    dropped: set[int] = set()
    for index, purge in purges:
        names = set(purge.get("names", ()))
        for i in range(index):
            event = contents.events[i]
            if event.get("tag") in names and int(event.get("step", 0)) >= purge["step"]:
                dropped.add(i)
    if dropped:
        contents.events[:] = [e for i, e in enumerate(contents.events) if i not in dropped]


def purge_event(run: Run, step: int, counts: dict[str, int], names: list[str]) -> dict[str, Any]:
    """The journal event of a writer opening *run* with ``purge_step=step``.

    *counts* are the scalar points of each of the run's *names* logged so far:
    sealing drops those at or after *step* (and the run's earlier events there).
    """
    return {
        "kind": PURGE_EVENT,
        "run": run.name,
        "step": int(step),
        "counts": counts,
        "names": names,
        "wall": time.time(),
    }


# -- reading -----------------------------------------------------------------------------------
def export_plan(body: dict[str, Any]) -> list[tuple[str, dict[str, str], list[dict[str, Any]]]]:
    """Where ``export tensorboard`` writes each point of a logs document.

    Returns:
        ``(dir, {name: tag}, sessions)`` per run, the evaluation's own first:
        the run's directory relative to the evaluation's (``""`` for the
        first run; never absolute, never above it), the names of the manifest
        it holds with the tag TensorBoard shows for each, and its add_hparams
        sessions. Names no run claims (``memostore.log``, logs sealed before
        runs) go to ``""`` with their own name as the tag.
    """
    owner: dict[str, tuple[str, str]] = {}  # journal name -> (dir, tag)
    run_dirs: dict[str, str] = {}
    plan: dict[str, tuple[dict[str, str], list[dict[str, Any]]]] = {"": ({}, [])}
    for record in body.get("runs", []):
        where = safe_dir(record.get("dir", ""))
        run_dirs[record["name"]] = where
        plan.setdefault(where, ({}, []))
        for name, tag in record.get("tags", {}).items():
            owner[name] = (where, tag)
    for name, entry in body.get("tags", {}).items():
        # A name sealing had to rename ("tag#kind") keeps the journal's name in "tag".
        logged = entry.get("tag", name)
        where, tag = owner.get(logged, ("", logged))
        plan[where][0][name] = tag
    for session in body.get("sessions", []):
        plan.setdefault(run_dirs.get(session["run"], ""), ({}, []))[1].append(session)
    return [(d, m, s) for d, (m, s) in plan.items() if m or s or not d]


def safe_dir(path: str) -> str:
    """*path* as a directory below the export's: no root, no ``..``, no odd characters.

    Logs can come from a pulled store: what they name must not write elsewhere.
    """
    parts = [p for p in str(path).replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return "/".join(re.sub(r"[^A-Za-z0-9._=+@-]+", "_", p) for p in parts)


__all__ = [
    "Run",
    "RunNames",
    "annotate",
    "evaluation_run",
    "export_plan",
    "journal_contents",
    "label",
    "logged_counts",
    "purge_event",
    "registry_for",
    "run_path",
    "run_records",
    "safe_dir",
]
