"""The points a viewer draws, from a recorded evaluation or from one still running.

:func:`open_source` turns a revision into a :class:`Source`: the sealed logs
of a recorded evaluation (read once), or the journal of a running one (read
incrementally by :class:`.LiveLogs`). ``memostore plot --follow`` calls
:meth:`Source.update` on each of its sources every interval and redraws when
one got new points; a source stops being live when its evaluation ends, and
then says how it ended.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import MemostoreError
from .live import LiveLogs
from .read import load_series
from .running import RunningEvaluation, resolve_running

if TYPE_CHECKING:
    from ..odb.store import Store

# After its journal is removed, a record is published within moments (an fsync):
# a follower looks for it this long before saying it ended unrecorded.
RECORD_WAIT_S = 10.0


class Source:
    """One evaluation's points for a viewer.

    Attributes:
        store: the store.
        name: the evaluation id, or the run id while it runs.
        function: its function.
        running: the running evaluation, or None for a recorded one.
        outcome: once a running evaluation has ended, how (``"ok"``, ``"error"``,
            ``"interrupted"``, with its evaluation id), else None.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        function: str,
        logs_id: str | None = None,
        running: RunningEvaluation | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.function = function
        self.running = running
        self.outcome: str | None = None
        self._logs_id = logs_id
        self._live: LiveLogs | None = None
        self._ended_at: float | None = None
        self._sealed: dict[str, tuple[np.ndarray, ...]] = {}
        if running is not None:
            try:
                self._live = running.logs()
                self._live.poll()
            except FileNotFoundError:
                self._ended_at = time.monotonic()  # ended just now: its record shows soon
                self._find_record()

    @property
    def live(self) -> bool:
        """True while the evaluation runs (or its record is still being published)."""
        return self.running is not None and self.outcome is None

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, values, walls)`` of *tag* so far (KeyError: not logged yet)."""
        if self._live is not None:
            return self._live.series(tag)
        if tag not in self._sealed:
            if not self._logs_id:
                raise KeyError(f"no tag {tag!r} in these logs (tags: none yet)")
            self._sealed[tag] = load_series(self.store, self._logs_id, tag)
        steps, values, walls = self._sealed[tag]
        return steps, values, walls

    def update(self) -> bool:
        """Read what arrived since the last update; True if there are new points."""
        if not self.live:
            return False
        new = False
        if self._live is not None:
            new = bool(self._live.poll())
            if self._live.ended:
                self._live.close()
                if self._ended_at is None:
                    self._ended_at = time.monotonic()
            elif not self._live.writer_alive():
                # Its process died: record it as interrupted (the journal then goes).
                from .recover import recover_orphans

                recover_orphans(self.store)
        if self._ended_at is not None:
            self._find_record()
        return new

    def _find_record(self) -> None:
        assert self.running is not None
        evaluation_id = self.running.recorded()
        if evaluation_id is not None:
            status = self.store.evaluation(evaluation_id).body.get("status")
            self.outcome = f"{status} (evaluation {evaluation_id[:12]})"
            self._logs_id = self.store.evaluation(evaluation_id).body.get("logs")
        elif self._ended_at is not None and time.monotonic() - self._ended_at > RECORD_WAIT_S:
            self.outcome = "ended, but no record of it was found"


def open_source(store: Store, rev: str, running: list[RunningEvaluation] | None = None) -> Source:
    """The source *rev* names: a running evaluation if it names one, else a recorded one.

    Raises:
        RevisionNotFound: *rev* names nothing.
        MemostoreError: a recorded evaluation that logged no metrics.
    """
    from ..odb.revisions import resolve_revision
    from ..records.evaluation import Evaluation

    target = resolve_running(store, rev, running)
    if isinstance(target, RunningEvaluation):
        return Source(store, target.run_id, target.function, running=target)
    evaluation_id = target or resolve_revision(store, rev)
    evaluation = Evaluation.load(store, evaluation_id)
    if not evaluation.logs_id:
        raise MemostoreError(
            f"evaluation {evaluation_id[:12]} ({evaluation.function}) logged no metrics; "
            "`memostore log` lists evaluations"
        )
    return Source(store, evaluation_id, evaluation.function, logs_id=evaluation.logs_id)


__all__ = ["RECORD_WAIT_S", "Source", "open_source"]
