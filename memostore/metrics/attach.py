"""Attaching a journal to an evaluation: when it opens, what its header says, sealing it.

A memoised call's journal opens when its body starts (:func:`begin`, called by
the memoised call as it enters its context), before anything is logged, so that other
processes list the call as running from its first moment and a call killed
before it logged is still recorded as interrupted. A standalone run's journal
opens with its first point (:func:`journal_for`), which is when the run
starts. Either way the journal is sealed into the evaluation's logs when the
evaluation ends (:func:`finalize`).

This module imports no NumPy (sealing, which needs it, is imported only when
there is something to seal): a program that memoises but never logs does not
pay for the metric code.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .journal import Journal, describe_process

if TYPE_CHECKING:
    from ..odb.store import Store
    from ..records.context import EvalContext

STATE_KEY = "memostore.metrics.journal"
HEADER_FORMAT = 1
# Fields of EvalContext.about copied into the header (see memostore.call.keys.call_about).
_ABOUT_FIELDS = ("args_summary", "args", "code", "code_digest")
_LINKED = ("args", "code")  # object ids: gc keeps them while the journal exists

# One journal per evaluation, however many threads log their first point at once.
_attach_lock = threading.Lock()
_recover_lock = threading.Lock()
_recovered: set[str] = set()


def header_for(ctx: EvalContext, linked: bool = True) -> dict[str, Any]:
    """The header record of *ctx*'s journal: what listings show while it runs.

    Args:
        ctx: the evaluation.
        linked: name its arguments and code documents (only once they are stored).
    """
    header: dict[str, Any] = {
        "format": HEADER_FORMAT,
        "function": ctx.function,
        "key": ctx.key,
        "run_id": ctx.run_id,
        "started": ctx.started,
        "hparams": dict(ctx.hparams),
        "process": describe_process(),
    }
    for name in _ABOUT_FIELDS:
        if ctx.about.get(name) is not None and (linked or name not in _LINKED):
            header[name] = ctx.about[name]
    return header


def recover_once(store: Store) -> None:
    """Seal the orphaned journals of *store*, the first time this process opens one there."""
    root = str(store.root)
    with _recover_lock:
        if root in _recovered:
            return
        _recovered.add(root)
    from .recover import recover_orphans

    recover_orphans(store)


def journal_for(ctx: EvalContext) -> Journal:
    """The journal of *ctx*, opened (and its sealing scheduled) on first use.

    Raises:
        MemostoreError: the evaluation has ended (its journal is sealed).
        OSError: the journal file cannot be created.
    """
    journal = ctx.state.get(STATE_KEY)
    if journal is None:
        with _attach_lock:
            journal = ctx.state.get(STATE_KEY)
            if journal is None:
                journal = _open(ctx)
    if journal.sealed:
        raise MemostoreError(f"the evaluation of {ctx.function} has already finished")
    return journal


def _open(ctx: EvalContext) -> Journal:
    directory = None
    linked = False
    if ctx.store.root is not None:
        directory = ctx.store.subdir("journal")
        recover_once(ctx.store)
        # A memoised call's arguments and code are stored (and its pending marker
        # kept) before its body starts; when storing them failed the marker is
        # gone, and the header must not name documents that may be incomplete.
        linked = (ctx.store.root / "pending" / f"{ctx.run_id}.json").exists()
    journal = Journal(directory, header_for(ctx, linked))
    ctx.state[STATE_KEY] = journal
    ctx.add_finalizer(finalize)
    if ctx.key is None:
        # A standalone run: no call records its script's arguments and code.
        from .script import begin as note_script

        note_script(ctx)
    return journal


def begin(ctx: EvalContext) -> None:
    """Open the journal of a memoised call as its body starts, so that it lists as running.

    Raises what :func:`journal_for` raises (the caller decides whether that matters).
    """
    journal_for(ctx)


def finalize(ctx: EvalContext, status: str) -> dict[str, Any]:
    """Seal *ctx*'s journal into a logs document.

    Returns:
        ``{"logs": id, "run_name": name}`` (``run_name``: the TensorBoard run
        the evaluation is known by, see :func:`.runs.evaluation_run`; absent
        when it has none), or ``{}`` if nothing was logged.
    """
    journal: Journal | None = ctx.state.get(STATE_KEY)
    if journal is None or journal.sealed:
        return {}
    contents = journal.finish()
    logs_id = None
    if not contents.empty:
        from .seal import seal

        logs_id = seal(ctx.store.objects, contents)
    # Removed only once the chunks are stored: until then a crash leaves the
    # journal for recovery.
    journal.discard()
    if logs_id is None:
        return {}
    ctx.links.docs.add(logs_id)
    from .runs import evaluation_run

    fields: dict[str, Any] = {"logs": logs_id}
    name = evaluation_run(contents.events, standalone=ctx.key is None)
    if name is not None:
        fields["run_name"] = name
    return fields


__all__ = ["STATE_KEY", "begin", "finalize", "header_for", "journal_for", "recover_once"]
