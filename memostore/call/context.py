"""The evaluation a piece of code is running inside, for logging and lineage.

Inside a memoised call, :func:`current` is that call's context; nested memoised
calls have their own. Outside any memoised call, :func:`current_or_run` starts
one standalone *run* evaluation for the whole script, recorded at exit.

Entering a memoised call's context (:func:`enter`) opens its metric journal,
so that other processes list the call as running from its start
(``memostore.metrics.attach``).
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

from ..odb.objects import Links

if TYPE_CHECKING:
    from ..odb.store import Store
    from .keys import KeyedCall

Finalizer = Callable[["EvalContext", str], dict[str, Any]]


@dataclass
class EvalContext:
    """One evaluation in progress.

    Attributes:
        store: where the evaluation will be recorded.
        function: the symbol of the memoised function (``run:<script>`` for runs).
        run_id: a unique name for this evaluation while it runs (journal file names).
        hparams: scalar arguments of the call.
        about: what listings show of the call while it runs (:func:`call_about`).
        state: scratch space for subsystems (the metric writer keeps its journal here).
        links: objects the finalizers stored that the record must keep reachable.
    """

    store: Store
    function: str
    key: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.time)
    hparams: dict[str, Any] = field(default_factory=dict)
    about: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    links: Links = field(default_factory=Links)
    _finalizers: list[Finalizer] = field(default_factory=list)

    def add_finalizer(self, fn: Finalizer) -> None:
        """Call ``fn(ctx, status)`` when the evaluation ends; its dict joins the record."""
        self._finalizers.append(fn)

    def finalize(self, status: str) -> dict[str, Any]:
        """Run every finalizer once; errors in one never stop the others."""
        import warnings

        from ..errors import MemostoreWarning

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
# Found by identity: EvalContext compares its fields (state included) with ==.
_own_runs: list[EvalContext] = []
_hooks_installed = False


def current() -> EvalContext | None:
    """The evaluation the caller runs inside, or None outside any memoised call."""
    return _current.get()


def call_about(call: KeyedCall) -> dict[str, Any]:
    """What a running memoised call shows before it is recorded: argument summaries and ids."""
    from .evaluation import summarize

    about: dict[str, Any] = {"args": call.args_id, "code_digest": call.code.digest}
    try:
        about["code"] = call.code_doc.id
        about["args_summary"] = {name: summarize(value) for name, value in call.arguments}
    except Exception:
        pass  # an object whose attributes raise: listed without summaries, never a failed call
    return about


def enter(ctx: EvalContext) -> Any:
    """Make *ctx* the current evaluation; a memoised call's journal opens now.

    Returns:
        The token :func:`leave` takes.
    """
    token = _current.set(ctx)
    if ctx.key is not None and ctx.store.root is not None:
        _begin(ctx)
    return token


def _begin(ctx: EvalContext) -> None:
    try:
        from ..metrics.attach import begin

        begin(ctx)
    except Exception:
        # Listing the call as running is a courtesy: the call goes on. If it
        # logs, opening the journal is tried again and a failure warns there.
        return


def leave(token: Any) -> None:
    _current.reset(token)


def _new_run(store: Store | None) -> EvalContext:
    from ..odb.store import Store as _Store

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "interactive"
    return EvalContext(store=store or _Store.default(), function=f"run:{script or 'python'}")


def current_or_run(store: Store | None = None) -> EvalContext:
    """The current evaluation, or the script's standalone run (started on first use)."""
    ctx = _current.get()
    if ctx is not None:
        return ctx
    global _run
    with _run_lock:
        if _run is None:
            _run = _new_run(store)
            _install_exit_hooks()
        return _run


def new_run(store: Store | None = None) -> EvalContext:
    """A standalone run evaluation of its own (a SummaryWriter's, outside memoised calls).

    Recorded by :func:`finish_own_run`, or at interpreter exit if still open.
    """
    ctx = _new_run(store)
    with _run_lock:
        _own_runs.append(ctx)
        _install_exit_hooks()
    return ctx


def finish_own_run(ctx: EvalContext) -> str | None:
    """Record a run made by :func:`new_run` now; its id, or None (nothing logged, or done)."""
    with _run_lock:
        index = next((i for i, c in enumerate(_own_runs) if c is ctx), None)
        if index is None:
            return None
        del _own_runs[index]
    from .evaluation import record_run

    return record_run(ctx, "error" if _run_failed else "ok")


def finish_run() -> str | None:
    """Record the standalone run now (also done at interpreter exit); its id or None."""
    global _run
    with _run_lock:
        run, _run = _run, None
    if run is None:
        return None
    from .evaluation import record_run

    return record_run(run, "error" if _run_failed else "ok")


def _finish_all() -> None:
    finish_run()
    for ctx in list(_own_runs):
        finish_own_run(ctx)


def _install_exit_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def hook(exc_type: Any, exc: Any, tb: Any) -> None:
        global _run_failed
        _run_failed = True
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    atexit.register(_finish_all)
