"""The standalone *run* evaluation of a script that logs outside any memoised call.

:func:`current_or_run` starts one run for the whole script on first use, and
each ``SummaryWriter`` made outside a memoised call may have its own
(:func:`new_run`); both are recorded by :func:`finish_run` /
:func:`finish_own_run`, or at interpreter exit if still open, with status
``error`` when the script ended in an uncaught exception.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from .context import EvalContext, current
from .evaluation import record_run

if TYPE_CHECKING:
    from ..odb.store import Store

_run: EvalContext | None = None
_run_lock = threading.Lock()
_run_failed = False
# Found by identity: EvalContext compares its fields (state included) with ==.
_own_runs: list[EvalContext] = []
_hooks_installed = False


def _new_run(store: Store | None) -> EvalContext:
    from ..odb.store import Store as _Store  # the store opens on first use only

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "interactive"
    return EvalContext(store=store or _Store.default(), function=f"run:{script or 'python'}")


def current_or_run(store: Store | None = None) -> EvalContext:
    """The current evaluation, or the script's standalone run (started on first use)."""
    ctx = current()
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
    return record_run(ctx, "error" if _run_failed else "ok")


def finish_run() -> str | None:
    """Record the standalone run now (also done at interpreter exit); its id or None."""
    global _run
    with _run_lock:
        run, _run = _run, None
    if run is None:
        return None
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
