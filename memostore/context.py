"""The evaluation a piece of code is running inside, for logging and lineage.

Inside a memoised call, :func:`current` is that call's context; nested memoised
calls have their own. Outside any memoised call, :func:`current_or_run` starts
one standalone *run* evaluation for the whole script, recorded at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .objects import Links

if TYPE_CHECKING:
    from .store import Store

Finalizer = Callable[["EvalContext", str], dict[str, Any]]


@dataclass
class EvalContext:
    """One evaluation in progress.

    Attributes:
        store: where the evaluation will be recorded.
        function: the symbol of the memoised function (``run:<script>`` for runs).
        run_id: a unique name for this evaluation while it runs (journal file names).
        hparams: scalar arguments of the call.
        state: scratch space for subsystems (the metric writer keeps its journal here).
        links: objects the finalizers stored that the record must keep reachable.
    """

    store: Store
    function: str
    key: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.time)
    hparams: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    links: Links = field(default_factory=Links)
    _finalizers: list[Finalizer] = field(default_factory=list)

    def add_finalizer(self, fn: Finalizer) -> None:
        """Call ``fn(ctx, status)`` when the evaluation ends; its dict joins the record."""
        self._finalizers.append(fn)

    def finalize(self, status: str) -> dict[str, Any]:
        """Run every finalizer once; errors in one never stop the others."""
        import warnings

        from .errors import MemostoreWarning

        fields: dict[str, Any] = {}
        finalizers, self._finalizers = self._finalizers, []
        for fn in finalizers:
            try:
                fields.update(fn(self, status) or {})
            except Exception as exc:
                warnings.warn(
                    f"memostore: could not finish recording {self.function}: {exc}",
                    MemostoreWarning,
                    stacklevel=2,
                )
        return fields


_current: ContextVar[EvalContext | None] = ContextVar("memostore_evaluation", default=None)
_run: EvalContext | None = None
_run_lock = threading.Lock()
_run_failed = False


def current() -> EvalContext | None:
    """The evaluation the caller runs inside, or None outside any memoised call."""
    return _current.get()


def enter(ctx: EvalContext) -> Any:
    return _current.set(ctx)


def leave(token: Any) -> None:
    _current.reset(token)


def current_or_run(store: Store | None = None) -> EvalContext:
    """The current evaluation, or the script's standalone run (started on first use)."""
    ctx = _current.get()
    if ctx is not None:
        return ctx
    global _run
    with _run_lock:
        if _run is None:
            from .store import Store as _Store

            script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "interactive"
            _run = EvalContext(
                store=store or _Store.default(), function=f"run:{script or 'python'}"
            )
            _install_exit_hooks()
        return _run


def finish_run() -> str | None:
    """Record the standalone run now (also done at interpreter exit); its id or None."""
    global _run
    with _run_lock:
        run, _run = _run, None
    if run is None:
        return None
    from .evaluation import record_run

    return record_run(run, "error" if _run_failed else "ok")


def _install_exit_hooks() -> None:
    previous = sys.excepthook

    def hook(exc_type: Any, exc: Any, tb: Any) -> None:
        global _run_failed
        _run_failed = True
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    atexit.register(finish_run)
