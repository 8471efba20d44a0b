"""Recording a miss: the evaluation document, its objects, and the refs that name it.

A miss stores the result and the argument effects from the bytes they hold
(a verifying encoder: no cached digest is trusted when writing), records which
global RNGs the body drew from, and publishes the evaluation last, so a crash
at any earlier point leaves the store as it was (plus unreachable objects).
A failure to store never breaks the caller's computation: it is one warning.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, Protocol

from ..effects import draws, reads
from ..effects.arguments import alias_paths, changed_names, plan_replay
from ..effects.identity import relations_of
from ..effects.places import RESULT
from ..effects.relations import Relations
from ..effects.replay import MISSING, NotReplayable, Planner
from ..errors import EncodeError, GradientGraphError, warn
from ..lifecycle import last_use
from ..lifecycle.trigger import after_store
from ..odb import index
from ..odb.objects import Doc
from ..odb.refs import ref_part
from ..odb.store import Store
from ..records import context
from ..records.evaluation import (
    error_record,
    eval_ref_name,
    evaluation_doc,
    failed_ref_name,
    summarize,
)
from ..records.provenance import provenance
from ..trust import signers
from ..values.decoding import Decoder
from ..values.encoding import Encoder, StoreSink
from ..values.rank_results import decode_result, depends_on_rank, per_rank_doc
from .rng_conditions import condition_ref_name, rng_ref_names

if TYPE_CHECKING:
    from .keys import KeyedCall

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def fix(exc: BaseException, store: Store | None) -> str:
    """How to fix a failed write into the store, when its cause says so (else "")."""
    where = f" at {store.root}" if store is not None and store.root is not None else ""
    for cause in (exc, exc.__cause__, exc.__context__):
        code = getattr(cause, "errno", None)
        if code in _DISK_FULL:
            return (
                f"; the disk holding the store{where} is full: free space there (`memostore gc` "
                "deletes what no evaluation needs) or move the store ($MEMOSTORE_DIR)"
            )
        if code in _NOT_WRITABLE:
            return (
                f"; the store{where} is not writable: make it writable, or set $MEMOSTORE_DIR "
                "to a writable directory (stored results are still read from it)"
            )
    return ""


# Functions already warned that their results hold autograd graphs (once per process).
_graph_warned: set[str] = set()


def _named(name: str, call: KeyedCall) -> str:
    return f"the global {name}" if name in call.watched.globals else f"argument {name!r}"


# Functions whose first miss in this process was checked for unseeded weights.
_weights_checked: set[str] = set()


def name_weight_miss(store: Store, call: KeyedCall) -> None:
    """Warn, once per function, when a miss differs from a stored call only in tensor values.

    A model built from an unseeded RNG before the call has other weights in
    every process, so the call misses every time; said at the default
    verbosity (``MEMOSTORE_VERBOSE=1`` says why each call misses).
    """
    symbol = call.fn.symbol
    if symbol in _weights_checked:
        return
    if call.encoder.parents:
        return  # tensors another memoised call made (a trained model): not an unseeded RNG's
    _weights_checked.add(symbol)
    try:
        # Nothing stored of this function yet (a first run): no comparison to import.
        if not store.refs.names(f"evals/{ref_part(symbol)}/"):
            return
        from ..inspect.comparison import tensor_value_changes

        paths = tensor_value_changes(
            store, symbol, call.args_id, call.code.digest, docs=call.sink.docs
        )
    except Exception:  # a courtesy: never fail the call for it
        return
    if paths:
        shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
        warn(
            f"{symbol} runs again: its arguments differ from the stored call's only in the "
            f"values of tensors ({shown}). If they are made from an unseeded RNG (a model "
            "built before torch.manual_seed), they differ in every process and the call "
            "never hits: seed before making them"
        )


class NotStorable(Exception):
    """The call's effects cannot be kept: its result is returned unstored (the message says why)."""


class ResultWriter(Protocol):
    """How a result becomes its value document, where that is not simply its encoding.

    A job whose ranks may return different results (``distributed/agreement.py``)
    writes them rank by rank. :meth:`write` may raise :class:`NotStorable`.
    """

    def write(self, encoder: Encoder, result: Any) -> str:
        """Store *result* (through *encoder*) and return the id of its value document."""
        ...

    def summary(self, result: Any) -> str:
        """The one-line result summary of the evaluation."""
        ...


def base_fields(call: KeyedCall, ctx: context.EvalContext, started: float) -> dict[str, Any]:
    fn = call.fn
    distributions = tuple(
        d.symbol.split(":", 1)[1] for d in call.code.deps.values() if d.kind == "distribution"
    )
    return {
        "function": fn.symbol,
        "key": call.key,
        "code": call.code_doc.id,
        "code_digest": call.code.digest,
        "version": fn.version,
        "args": call.args_id,
        "hparams": ctx.hparams,
        "args_summary": {name: summarize(value) for name, value in call.arguments},
        "started": started,
        "provenance": provenance(fn.code_file, distributions),
        "parents": sorted(call.encoder.parents),
    }


def _effects(call: KeyedCall) -> tuple[list[str], list[str]]:
    """(mutated, rebound) names of the call's arguments and data globals."""
    try:
        return changed_names(call.watched, call.args_id, call.args_node)
    except EncodeError as exc:
        raise NotStorable(f"an argument cannot be hashed after the call ({exc})") from exc


def _check_replayable(
    store: Store,
    effects: dict[str, str],
    rebound: list[str],
    call: KeyedCall,
    code: tuple[Any, str],
    records: list[list[Any]],
    result_id: str,
) -> None:
    """Decode the effects just stored and plan their replay, as a hit will (changes nothing).

    *code*: the evaluation's payloads and order annex, as a hit's decoder gets them.
    """
    decoder = Decoder(store.objects, code[0], orders=code[1])
    sources = {name: decoder.decode_value(doc_id) for name, doc_id in effects.items()}
    relations = None
    # A result that is an argument itself (``return model``) needs no decoding here:
    # the argument's own effect, if any, is what a hit updates.
    check_result = any(_about_result(record) for record in records)
    if records:
        if check_result:
            sources[RESULT] = decode_result(decoder, result_id)  # this rank's, when per rank
        assert call.layout is not None
        relations = Relations(records, call.layout.object_at, sources)
    planner = Planner(relations=relations)
    try:
        plan_replay(planner, call.watched, {n: sources[n] for n in effects}, rebound)
        if check_result:
            planner.root(RESULT, MISSING, sources[RESULT])
    except NotReplayable as exc:
        raise NotStorable(f"its effect on {exc}") from exc


def _reads_vary(store: Store, call: KeyedCall, observed: dict[str, Any]) -> bool:
    """Whether this key was stored having read other values: keep both, by condition.

    A call whose body read environment variables or files is named by its
    condition ref (as a call that drew from an RNG is) only once what it read
    differs between calls of its key: most such reads (a data directory, a
    flag, a dataset file) never change, and one ref per key is enough for them.
    The evaluation stored before, with the other values, gets its condition ref
    now too (unless it has one).
    """
    try:
        previous = store.refs.read(eval_ref_name(call.fn.symbol, call.key))
        if previous is None:
            return False
        body = store.evaluation(previous).body
    except Exception:
        return False  # a damaged ref or record: nothing to keep beside
    before = reads.recorded(body)
    if not before or before == observed or body.get("key") != call.key:
        return False
    if not draws.conditions(body.get("rng")):  # one with RNG conditions has its refs already
        store.refs.set(condition_ref_name(call.fn.symbol, call.key, {}, before), previous)
    return True


def _about_result(record: list[Any]) -> bool:
    """Whether *record* needs the stored result to be checked (not just ``return argument``)."""
    path = record[0]
    if path[0] == RESULT and (len(path) > 1 or record[1] != "pre"):
        return True
    return record[1] in ("same", "view") and record[2][0] == RESULT


def _relations(call: KeyedCall, mutated: list[str], rebound: list[str], result: Any) -> list[Any]:
    """What the body bound anew, moved or viewed, as a hit must repeat (``identity.py``)."""
    if call.layout is None:
        return []
    roots = [
        (name, call.watched.value_of(name), name in rebound)
        for name in sorted({*mutated, *rebound})
    ]
    return relations_of(call.layout, roots, result)


def store_result(
    store: Store,
    call: KeyedCall,
    ctx: context.EvalContext,
    result: Any,
    started: float,
    duration: float,
    rng_used: dict[str, draws.Draw],
    writer: ResultWriter | None = None,
) -> None:
    """Store a miss's result, effects and RNG record, then publish it (warns on failure).

    *writer*: how the result is written, when not by encoding it (see :class:`ResultWriter`).
    """
    symbol = call.fn.symbol
    try:
        mutated, rebound = _effects(call)
        # Fields first (provenance may read the user's git repository): from the
        # first result object written to the ref's publication, only gc's grace
        # period keeps those objects, so that window stays as short as possible.
        fields = base_fields(call, ctx, started)
        sink = StoreSink(store.objects)
        encoder = Encoder(sink, verify=True)
        try:
            try:
                if writer is None:
                    result_id = encoder.encode_value(result)
                    if depends_on_rank(store, eval_ref_name(symbol, call.key)):
                        # This process's result, not every rank's (see rank_results.py).
                        result_id = sink.put_doc(per_rank_doc([result_id]))
                else:
                    result_id = writer.write(encoder, result)
            except GradientGraphError as exc:
                raise GradientGraphError(f"its result holds {exc}") from exc
            effects = {}
            for name in (*mutated, *rebound):
                try:
                    effects[name] = encoder.encode_value(call.watched.value_of(name))
                except GradientGraphError as exc:
                    raise GradientGraphError(f"it left {_named(name, call)} holding {exc}") from exc
                except EncodeError as exc:
                    raise NotStorable(
                        f"the state it left in an argument cannot be stored ({exc})"
                    ) from exc
            orders = encoder.order_annex()
        finally:
            sink.abort()  # a pack left by a failed encoding (none once it succeeded)
        payloads = dict(sorted({**call.encoder.payloads, **encoder.payloads}.items()))
        records = _relations(call, mutated, rebound, result)
        if effects or records:
            _check_replayable(store, effects, rebound, call, (payloads, orders), records, result_id)
        fields.update(
            result=result_id,
            result_summary=summarize(result) if writer is None else writer.summary(result),
            status="ok",
            error=None,
            duration_s=duration,
            payloads=payloads,
            logs=None,
        )
        if orders:
            fields["orders"] = orders
        if effects:
            fields["effects"] = effects
        if rebound:
            fields["rebound"] = sorted(rebound)
        aliases = alias_paths(result, call.watched.items)
        if aliases:
            fields["aliases"] = aliases
        if records:
            fields["identity"] = records
        if rng_used:
            fields["rng"] = draws.record(rng_used, store.objects.add_bytes)
        if call.settings:
            fields["settings"] = dict(call.settings)
        fields.update(call.reads)
        fields.update(ctx.finalize("ok"))
        observed = reads.recorded(call.reads)
        refs = rng_ref_names(symbol, call.key, fields.get("rng"), observed)
        if not refs and observed and _reads_vary(store, call, observed):
            refs.append(condition_ref_name(symbol, call.key, {}, observed))
        refs.append(eval_ref_name(symbol, call.key))
        doc = publish(store, fields, ctx, refs)
    except GradientGraphError as exc:
        ctx.finalize("ok")
        if symbol not in _graph_warned:
            _graph_warned.add(symbol)
            warn(
                f"{symbol} is not memoised: {exc}, and a stored copy would come back "
                "detached, so that gradients would not reach what made it. Its calls run "
                "every time (this is said once). Call .detach() inside the function on what "
                "it returns (or keeps), or memoise only the part that needs no gradients"
            )
        return
    except NotStorable as exc:
        ctx.finalize("ok")
        warn(
            f"the result of {symbol} is not stored: {exc}; it is returned, and the next call "
            "will run the function again"
        )
        return
    except Exception as exc:
        ctx.finalize("ok")  # else its journal stays behind, and is later taken for a crash
        warn(
            f"could not store the result of {symbol} ({type(exc).__name__}: {exc})"
            f"{fix(exc, store)}; it is returned unstored and the next call will compute it "
            "again"
        )
        return
    call.stored = doc
    last_use.note_use(store, doc.id, hit=False)
    after_store(store)  # a size limit is enforced in the background, at most once a minute


def record_failure(
    store: Store,
    call: KeyedCall,
    ctx: context.EvalContext,
    exc: BaseException,
    status: str,
    started: float,
    duration: float,
) -> None:
    """Record a call whose body raised *exc* (or was interrupted) after *duration* seconds."""
    try:
        fields = base_fields(call, ctx, started)
        fields.update(
            result=None,
            result_summary=None,
            status=status,
            error=error_record(exc),
            duration_s=duration,
            payloads=dict(sorted(call.encoder.payloads.items())),
            logs=None,
        )
        fields.update(ctx.finalize(status))
        publish(store, fields, ctx, [failed_ref_name(call.fn.symbol, call.key)])
    except Exception as record_exc:
        ctx.finalize(status)
        warn(
            f"could not record the failure of {call.fn.symbol}: {record_exc}"
            f"{fix(record_exc, store)}"
        )


_sign_warned: set[str] = set()


def _sign(store: Store, evaluation_id: str) -> None:
    """Sign a new evaluation; a key that cannot be had warns once and leaves it unsigned.

    Unsigned, it is still served here (it originated here) and ``push`` signs it.
    """
    try:
        signers.sign(store, evaluation_id)
    except Exception as exc:
        message = str(exc)
        if message not in _sign_warned:
            _sign_warned.add(message)
            warn(f"evaluations are stored unsigned: {message}")


def publish(
    store: Store, fields: dict[str, Any], ctx: context.EvalContext, ref_names: list[str]
) -> Doc:
    """Write the evaluation record, make everything durable, then point *ref_names* at it.

    The refs are written last: until then nothing names the new objects. The
    call's own ref comes last of all, so that whoever reads it finds the other.
    One barrier makes the objects and the first ref's new content durable
    together, before that ref is replaced (group commit).
    """
    doc = evaluation_doc(fields, ctx.links)
    store.objects.add_doc(doc)
    _sign(store, doc.id)
    for name in ref_names:
        store.refs.set(name, doc.id, flush=store.objects.sync)
    index.record(store, doc.id, doc.body)
    return doc
