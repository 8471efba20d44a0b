"""The evaluation a piece of code is running inside, for logging and lineage.

Inside a memoised call, :func:`current` is that call's context; nested memoised
calls have their own. Outside any memoised call, code that logs uses the
script's standalone run (:mod:`.standalone`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..odb.objects import Links

if TYPE_CHECKING:
    from ..odb.store import Store

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
        from ..errors import warn

        fields: dict[str, Any] = {}
        finalizers, self._finalizers = self._finalizers, []
        for fn in finalizers:
            try:
                fields.update(fn(self, status) or {})
            except Exception as exc:
                warn(f"could not finish recording {self.function}: {exc}")
        return fields


# Public for hot paths that read it on every logged point (a ContextVar.get, no
# call); everyone else calls current().
current_evaluation: ContextVar[EvalContext | None] = ContextVar(
    "memostore_evaluation", default=None
)


def current() -> EvalContext | None:
    """The evaluation the caller runs inside, or None outside any memoised call."""
    return current_evaluation.get()


def enter(ctx: EvalContext) -> Any:
    """Make *ctx* the current evaluation.

    Returns:
        The token :func:`leave` takes.
    """
    return current_evaluation.set(ctx)


def leave(token: Any) -> None:
    current_evaluation.reset(token)
