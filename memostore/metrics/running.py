"""Evaluations in progress, found through their journals.

Every evaluation in progress has a journal in ``journal/``: a memoised call's
opens as its body starts, a standalone run's with its first point
(:mod:`.attach`). Listing what runs therefore reads one directory and, per
journal, its header record: no evaluation document and no object. A journal
whose writer is gone (:func:`.recover.writer_alive`: its pid has exited on this
host, or it has not been touched for a while on another) is not running;
:func:`running_evaluations` seals it and records it as interrupted first, so
that it appears in the ordinary listing instead.

A running evaluation has no evaluation id yet (its record is written when it
ends): it is named by its *run id*, the journal's name, 32 hex digits that a
revision may abbreviate like an evaluation id.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import MemostoreError, RevisionNotFound
from .journal import JOURNAL_SUFFIX, Contents, parse_into, read_header
from .runs import evaluation_run

if TYPE_CHECKING:
    from ..odb.store import Store
    from .live import LiveLogs

_HEX = frozenset("0123456789abcdef")
# A memoised call's record is stamped a moment after its journal's header.
_STARTED_SLACK_S = 1e-3
# How much of a journal is read for its run name: a writer declares its run with
# its first point, so the declaration is near the start.
_RUN_SCAN_BYTES = 1 << 18


@dataclass(frozen=True)
class RunningEvaluation:
    """One evaluation in progress, as its journal's header describes it.

    Attributes:
        store: the store it runs in.
        run_id: its name while it runs (the journal's file name).
        path: its journal.
        header: the journal's header record (function, key, started, process, ...).
        last_seen: when its journal was last written or touched (UNIX time).
    """

    status: ClassVar[str] = "running"

    store: Store
    run_id: str
    path: Path
    header: Mapping[str, Any]
    last_seen: float

    @property
    def function(self) -> str:
        """``module:qualname`` of the memoised function, ``run:<script>`` for a run."""
        return str(self.header.get("function") or "run:unknown")

    @property
    def key(self) -> str | None:
        """The call key (None for a standalone run)."""
        key = self.header.get("key")
        return key if isinstance(key, str) else None

    @property
    def started(self) -> float:
        started = self.header.get("started")
        if isinstance(started, (int, float)) and math.isfinite(started):
            return float(started)
        return self.last_seen

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self.header.get("hparams") or {})

    @property
    def args_summary(self) -> dict[str, str]:
        summary = self.header.get("args_summary")
        if not isinstance(summary, Mapping):
            return {}
        return {str(k): v for k, v in summary.items() if isinstance(v, str)}

    @property
    def args(self) -> dict[str, Any]:
        """Arguments by name: scalars as values, anything else as a summary line."""
        from ..records.names import call_arguments

        return call_arguments({"hparams": self.hparams, "args_summary": self.args_summary})

    @property
    def process(self) -> dict[str, Any]:
        """``{"host", "pid", "argv", "cwd", "python"}`` of the process running it."""
        return dict(self.header.get("process") or {})

    @property
    def run_name(self) -> str | None:
        """The TensorBoard run it is known by (:func:`.runs.evaluation_run`), once declared."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(_RUN_SCAN_BYTES)
        except OSError:
            return None
        contents = Contents()
        parse_into(contents, data)
        return evaluation_run(contents.events, standalone=self.key is None)

    def logs(self) -> LiveLogs:
        """Its metrics so far, read incrementally from the journal (see :class:`.LiveLogs`)."""
        from .live import LiveLogs

        return LiveLogs(self.path)

    def recorded(self) -> str | None:
        """The id of its evaluation record once it has ended, else None."""
        return recorded_evaluation(self.store, self.function, self.key, self.started)

    def record(self, now: float | None = None) -> dict[str, Any]:
        """The evaluation as ``memostore log --json`` lists it (status ``running``)."""
        from ..odb.index import iso_time

        now = time.time() if now is None else now
        process = self.process
        return {
            "id": self.run_id,
            "run_id": self.run_id,
            "function": self.function,
            "status": self.status,
            "created": iso_time(self.started),
            "started": self.started,
            "duration_s": max(0.0, now - self.started),
            "args": self.args,
            "args_summary": self.args_summary,
            "parents": [],
            "key": self.key,
            "result": None,
            "error": None,
            "logs": None,
            "run_name": self.run_name,
            "refs": [],
            "host": process.get("host"),
            "pid": process.get("pid"),
            "seen_s_ago": max(0.0, now - self.last_seen),
        }


@dataclass(frozen=True)
class OrphanedEvaluation(RunningEvaluation):
    """An evaluation whose process died: its journal is there, not sealed yet.

    Listed as ``interrupted``, as it will be recorded once a process that
    writes to the store recovers it (:mod:`.recover`); a reader that writes
    nothing (the dashboard) shows it so meanwhile, named by its run id.
    """

    status: ClassVar[str] = "interrupted"

    def record(self, now: float | None = None) -> dict[str, Any]:
        """As :meth:`RunningEvaluation.record`, ending when its journal was last written."""
        record = super().record(self.last_seen)
        record["error"] = "memostore.ProcessDied"
        record.pop("seen_s_ago", None)
        return record


def journal_evaluations(store: Store) -> tuple[list[RunningEvaluation], list[OrphanedEvaluation]]:
    """The evaluations *store*'s journals hold: (running, orphaned), each newest first.

    Reads each journal's header and nothing else; recovers nothing.
    """
    if store.root is None:
        return [], []
    directory = store.root / "journal"
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    from .recover import writer_alive

    now = time.time()
    found: list[RunningEvaluation] = []
    orphans: list[OrphanedEvaluation] = []
    for name in sorted(names):
        if not name.endswith(JOURNAL_SUFFIX):
            continue
        path = directory / name
        try:
            # Non-blocking: a FIFO given a journal's name must not hang a listing.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue  # sealed and removed meanwhile, or unreadable
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            header = read_header(fd)
            if not isinstance(header, dict):
                continue
            run_id = name[: -len(JOURNAL_SUFFIX)]
            seen = os.fstat(fd).st_mtime
            if writer_alive(fd, header, now):
                found.append(RunningEvaluation(store, run_id, path, header, seen))
            else:
                orphans.append(OrphanedEvaluation(store, run_id, path, header, seen))
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd)
    found.sort(key=lambda r: (-r.started, r.run_id))
    orphans.sort(key=lambda r: (-r.started, r.run_id))
    return found, orphans


def running_evaluations(
    store: Store | None = None, *, recover: bool = True
) -> list[RunningEvaluation]:
    """The evaluations in progress in *store* (the default store), newest first.

    Args:
        store: the store; None for :meth:`memostore.Store.default`.
        recover: seal and record as interrupted the journals whose writer is
            gone (they are then ordinary evaluations, not listed here).
    """
    if store is None:
        from ..odb.store import Store

        store = Store.default(create=False)
    found, orphans = journal_evaluations(store)
    if orphans and recover:
        from .recover import recover_orphans

        recover_orphans(store)
    return found


def running_of(
    function: str | None, running: Iterable[RunningEvaluation]
) -> list[RunningEvaluation]:
    """Those of *running* whose function *function* names (as a revision would), or all."""
    running = list(running)
    if function is None:
        return running
    from ..odb.revisions import function_matches

    wanted = set(function_matches({r.function for r in running}, function))
    return [r for r in running if r.function in wanted]


def recorded_evaluation(store: Store, function: str, key: str | None, started: float) -> str | None:
    """The evaluation recorded for the call of *function* (and *key*) that started at *started*.

    A memoised call is found through its ``evals/`` or ``failed/`` ref, a
    standalone run among its script's runs. None while it is not recorded.
    """
    from ..odb.revisions import listed_evaluations
    from ..records.evaluation import eval_ref_name, failed_ref_name

    if key is None:
        listed, _ = listed_evaluations(store, functions=[function])
        for entry in listed:
            when = entry.get("started")
            if isinstance(when, (int, float)) and abs(when - started) <= _STARTED_SLACK_S:
                return str(entry["id"])
        return None
    best: tuple[float, str] | None = None
    for name in (eval_ref_name(function, key), failed_ref_name(function, key)):
        with contextlib.suppress(MemostoreError, OSError):
            evaluation_id = store.refs.read(name)
            if evaluation_id is None:
                continue
            when = store.evaluation(evaluation_id).body.get("started")
            ours = isinstance(when, (int, float)) and when >= started - _STARTED_SLACK_S
            if ours and (best is None or when > best[0]):
                best = (float(when), evaluation_id)
    return None if best is None else best[1]


def resolve_running(
    store: Store, rev: str, running: list[RunningEvaluation] | None = None
) -> RunningEvaluation | str | None:
    """What *rev* names once running evaluations count too.

    A run id prefix (4 hex digits or more) names a running evaluation; a
    function name names its newest evaluation, running or recorded, and
    ``NAME~N`` counts back through both.

    Returns:
        The running evaluation; an evaluation id (``NAME~N`` landing on a
        recorded one); or None when *rev* names no running evaluation (resolve
        it with :func:`memostore.odb.revisions.resolve_revision`).

    Raises:
        AmbiguousRevision: *rev* matches several evaluations or functions.
        RevisionNotFound: ``~N`` counts back past the oldest one.
    """
    from ..odb.revisions import MIN_PREFIX, AmbiguousRevision, resolve_revision

    live = running_evaluations(store) if running is None else running
    if not live:
        return None
    base, sep, count = rev.strip().rpartition("~")
    if not sep:
        base, count = rev.strip(), "0"
    elif count == "":
        count = "1"
    if not count.isdigit():
        return None  # the ordinary resolver explains the mistake
    older = int(count)
    lowered = base.lower()
    if len(lowered) >= MIN_PREFIX and set(lowered) <= _HEX:
        matches = [r for r in live if r.run_id.startswith(lowered)]
        if not matches:
            return None
        candidates = [(r.run_id[:12], f"({r.function}, running)") for r in matches]
        try:
            candidates.append((resolve_revision(store, base)[:12], "(evaluation)"))
        except AmbiguousRevision as exc:
            candidates += exc.candidates
        except RevisionNotFound:
            pass
        if len(candidates) > 1:
            raise AmbiguousRevision(rev, candidates)
        return _counted_back(store, matches[0].function, matches[0], older, live, rev)
    function = _running_function(store, base, live, rev)
    if function is None:
        return None
    return _counted_back(store, function, None, older, live, rev)


def _running_function(
    store: Store, query: str, live: list[RunningEvaluation], rev: str
) -> str | None:
    from ..odb import index
    from ..odb.revisions import AmbiguousRevision, function_matches, listed_evaluations

    running = {r.function for r in live}
    recorded = {e["function"] for e in index.load(store).values()} - running
    matches = function_matches(running | recorded, query)
    if not running.intersection(matches):
        return None
    # A function the index remembers but whose evaluations are all gone is no rival.
    rivals = [
        f for f in matches if f not in running and listed_evaluations(store, functions=[f])[0]
    ]
    names = sorted(set(matches) & running) + rivals
    if len(names) > 1:
        raise AmbiguousRevision(rev, [(f, "(function)") for f in names])
    return names[0]


def _counted_back(
    store: Store,
    function: str,
    anchor: RunningEvaluation | None,
    older: int,
    live: list[RunningEvaluation],
    rev: str,
) -> RunningEvaluation | str:
    if older == 0 and anchor is not None:
        return anchor
    from ..odb.revisions import listed_evaluations

    items: list[tuple[float, RunningEvaluation | str]] = [
        (r.started, r) for r in live if r.function == function
    ]
    listed, _ = listed_evaluations(store, functions=[function])
    for entry in listed:
        when = entry.get("started")
        items.append((float(when) if isinstance(when, (int, float)) else 0.0, str(entry["id"])))
    items.sort(key=lambda item: -item[0])
    position = 0
    if anchor is not None:
        position = next(i for i, (_, item) in enumerate(items) if item is anchor)
    if position + older >= len(items):
        raise RevisionNotFound(
            f"{rev!r}: {function} has only {len(items)} evaluation(s); "
            "see them with `memostore log FUNCTION`"
        )
    return items[position + older][1]


__all__ = [
    "OrphanedEvaluation",
    "RunningEvaluation",
    "journal_evaluations",
    "recorded_evaluation",
    "resolve_running",
    "running_evaluations",
    "running_of",
]
