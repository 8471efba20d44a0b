"""The ``@memo`` decorator: key a call, return the stored result or compute and store it.

Call flow (``docs/architecture.md`` walks it with every file):

1. bind the arguments, apply defaults, drop ``ignore``-d ones, key declared
   paths by content (``values/paths.py``); add the data globals the code
   reads (``effects/arguments.py``);
2. key = digest(function symbol, code digest of its dependency closure
   (``code/deps.py``), digest of the arguments and data globals, ``version``)
   (``records/evaluation.py:call_key``; salted by rank in ``per_rank`` mode:
   ``ranks.py``); the store comes from ``stores.py``;
3. a rank of a torch.distributed job hands the call to the group runner
   (``ranks.py``, then ``distributed/calls.py`` through :class:`MemoSeam`);
   any other process goes on here;
4. ``refs/evals/<function>/<key>`` names the evaluation; a hit is prepared
   without changing anything (its RNG condition: ``rng_conditions.py``; its
   result, argument effects and RNG states: ``hits.py``), then committed. A
   missing, corrupt or stale (code changed) result, or one that cannot be
   replayed here, is a miss;
5. on a miss, single-flight waits for a live caller of the same call or takes
   its lease (``single_flight.py``); then store the arguments, run the body
   inside an evaluation context (``records/context.py``, its metric journal
   opened: ``metrics/attach.py``) watching the global RNGs
   (``effects/draws.py``), then store the result, the arguments' post-call
   states and the RNG record, and publish the ref last, so a crash at any
   point leaves the previous state intact (``recording.py``);
6. a failure to store warns (:class:`MemostoreWarning`) and returns the result.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import time
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from ..effects import draws, identity, process, reads, seeding
from ..effects.arguments import MISSING, Watched
from ..errors import (
    DecodeError,
    EncodeError,
    MemostoreError,
    ObjectNotFound,
    StaleCode,
)
from ..errors import warn as _warn
from ..lifecycle import last_use
from ..metrics import attach
from ..odb.store import Store
from ..records import context
from ..records.evaluation import (
    Evaluation,
    call_key,
    eval_ref_name,
    key_tail,
    key_with,
    scalar_hparams,
)
from ..trust import signers
from ..trust.errors import UntrustedCode, warn_once
from ..values.decoding import Decoder
from ..values.encoding import Encoder, HashSink
from ..values.hashcache import digest_cache, lineage_cache
from . import hits, ranks, recording, rng_conditions, verbose
from .keys import FastBinder, KeyedCall, call_about
from .stores import open_store

if TYPE_CHECKING:
    from . import single_flight


def _load_call_modules() -> None:
    """Import single-flight with the first ``@memo``.

    Milliseconds that ``import memostore`` alone (every CLI command) need not
    pay; a decorated function needs it from its first call on, so its
    decoration imports it (once: later calls find it in ``sys.modules``).
    """
    global single_flight
    from . import single_flight

    if "torch" in sys.modules:
        # torch is in use: its codec package watches, from now on, what writes
        # tensors unseen (``torch.from_numpy`` over an array the program keeps).
        from ..values.codecs import registry

        registry.load_entry_points()


__all__ = ["MemoizedFunction", "call_key", "memo"]

# From here on, seeding the global RNGs already imported (random, numpy) is watched,
# and their lineage so far is read from their state (``effects/seeding.py``): a
# program's draws between this import and its first @memo must not hide it.
seeding.meet(load_codecs=False)

P = ParamSpec("P")
R = TypeVar("R")

# What a look-up found under a ref it could not read (see _restore_if_moved).
_DAMAGED_REF = "damaged"


def _symbol(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


_fix = recording.fix

# Hits whose arguments and code were checked in this process (see _heal), at most.
_HEALED_MAX = 1 << 16


class MemoizedFunction(Generic[P, R]):
    """A function whose calls are looked up in, and stored into, a store.

    Typed as the function it wraps: ``MemoizedFunction[P, R]`` takes the
    function's parameters ``P`` and returns its ``R``; :meth:`key` and
    :meth:`lookup` take the same parameters.
    """

    __wrapped__: Callable[P, R]

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        ignore: Iterable[str] = (),
        files: Iterable[str] = (),
        version: str | None = None,
        store: Store | str | os.PathLike[str] | None = None,
        rng: str = "lineage",
        wait: bool | float = True,
        distributed: str = "all",
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@memo needs a function, got {fn!r}")
        _refuse_deferred(fn)
        _load_call_modules()
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        self._fn = fn
        self._signature = inspect.signature(fn)
        self._binder = FastBinder(self._signature)
        self._ignore = frozenset(ignore)
        unknown = self._ignore - set(self._signature.parameters)
        if unknown:
            raise MemostoreError(
                f"@memo(ignore=...) names {sorted(unknown)}, which {fn.__qualname__} "
                f"does not take; its parameters are {list(self._signature.parameters)}"
            )
        self._rng_mode = rng_conditions.check_mode(rng)
        self._track_rng = rng != "ignore"
        # Watch the seeding functions of the RNG libraries imported by now, before the
        # program's code after this definition can seed them (``effects/seeding.py``).
        seeding.meet(load_codecs=False)
        self._wait = single_flight.check_wait(wait)
        self._distributed = ranks.check_mode(distributed)
        self._version = None if version is None else str(version)
        self.version = self._version
        self._store = store
        self.symbol = _symbol(fn)
        from ..values.paths import PathArguments

        # Declared path parameters keyed by content.
        parameters = list(self._signature.parameters)
        self._paths = PathArguments(self.symbol, parameters, files, self._ignore)
        self._key_tail = key_tail(self.symbol, self._version)
        # The call's ref name, but for the key at its end (escaping the symbol costs a regex).
        self._eval_ref_prefix = eval_ref_name(self.symbol, "")
        self.code_file = inspect.getsourcefile(fn) if hasattr(fn, "__code__") else None
        self._code_docs_written: set[tuple[str, str]] = set()
        self._healed: set[tuple[Any, ...]] = set()
        self._unkeyable: set[str] = set()  # data globals that cannot be hashed
        self._seam = MemoSeam(self)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<memo {self.symbol}>"

    # -- keys ---------------------------------------------------------------------------
    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        arguments = self._binder.bind_all(args, kwargs)
        if self._ignore:
            items = [(k, v) for k, v in arguments.items() if k not in self._ignore]
        else:
            items = list(arguments.items())
        return self._paths.apply(items)

    def _code(self) -> Any:
        from ..code.deps import code_info

        return code_info(self._fn)

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> KeyedCall:
        arguments = self._bind(args, kwargs)
        code = self._code()
        watched = _watched(arguments, code, self._unkeyable)
        sink = HashSink()
        encoder = Encoder(sink)
        try:
            args_id = encoder.encode_mapping(watched.items)
        except EncodeError:
            if len(watched.items) == len(arguments) or not self._skip_unkeyable(watched):
                raise  # an argument itself cannot be keyed: the caller must know
            return self._prepare(args, kwargs)
        settings = process.settings()
        tail = key_tail(self.symbol, self._version, settings) if settings else self._key_tail
        key = ranks.rank_key(self._distributed, key_with(tail, code.digest, args_id))
        return KeyedCall(self, arguments, watched, code, sink, encoder, args_id, key, settings)

    def _skip_unkeyable(self, watched: Watched) -> bool:
        """Leave out of the key the data globals that cannot be encoded; any found?

        A global holding something that cannot be hashed (a context manager, a
        console) is keyed by its type, as a service object is, and named in one
        warning: the call goes on, and ``ignore_global`` silences it.
        """
        found = False
        for name, value in watched.items:
            if name not in watched.globals or name in self._unkeyable:
                continue
            try:
                Encoder(HashSink()).encode_value(value)
            except EncodeError as exc:
                self._unkeyable.add(name)
                found = True
                _warn(
                    f"{self.symbol} reads the global {name}, a {type(value).__qualname__} "
                    f"that cannot be hashed ({exc}); it is keyed by its type only, and changes "
                    f"to it are not replayed by hits. Pass it as an argument listed in "
                    f"ignore=, or mark it with memostore.ignore_global, to silence this"
                )
        return found

    def key(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """The hex call key of these arguments (the body does not run)."""
        return self._prepare(args, kwargs).key

    def lookup(self, *args: P.args, **kwargs: P.kwargs) -> Evaluation | None:
        """The stored evaluation for these arguments, or None (the body does not run).

        None too for one a call would not be served: pulled, and signed by no
        allowed signer (its result must not reach the program by this door).
        """
        call = self._prepare(args, kwargs)
        store = open_store(self._store)
        evaluation_id = store.refs.read(self._eval_ref_prefix + call.key)
        if evaluation_id is None or signers.refusal(store, evaluation_id) is not None:
            return None
        try:
            return Evaluation.load(store, evaluation_id)
        except (ObjectNotFound, MemostoreError):
            return None

    # -- calls --------------------------------------------------------------------------------
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            call = self._prepare(args, kwargs)
        except EncodeError as exc:
            raise EncodeError(f"cannot key a call of {self.symbol}: {exc}") from exc
        try:
            store = open_store(self._store)
        except OSError as exc:
            _warn(
                f"cannot open the store for {self.symbol} ({exc}){_fix(exc, None)}; "
                "running unstored"
            )
            return self._fn(*args, **kwargs)
        outcome = ranks.run_in_group(self._seam, store, call, args, kwargs)  # None: no job
        if isinstance(outcome, ranks.Computed):
            return outcome.result
        ref = self._eval_ref_prefix + call.key
        seen: list[str | None] = []  # what the lookup found under the ref
        hit = self._restore(store, ref, call, seen) if outcome is None else outcome
        if outcome is None and not isinstance(hit, hits.Hit):
            # The hit path trusts the store it opened before; a miss is about to write.
            try:
                store = open_store(self._store, check=True)
            except OSError as exc:
                _warn(
                    f"cannot open the store for {self.symbol} ({exc}){_fix(exc, None)}; "
                    "running unstored"
                )
                return self._fn(*args, **kwargs)
        flight = None
        if not isinstance(hit, hits.Hit) and self._wait is not False:
            # Only after a miss: another caller computing this key is waited for.
            flight = single_flight.begin(
                store,
                ref,
                self.symbol,
                call.key,
                self._wait,
                lambda: self._restore(store, ref, call),
                recheck=lambda: self._restore_if_moved(store, ref, call, seen),
            )
            if flight.hit is not None:
                hit = flight.hit
        if isinstance(hit, hits.Hit):
            try:
                result = hit.commit()
            except Exception as exc:
                # Planned, so only the unforeseeable fails here (out of memory in a
                # copy): say plainly that the program may now be half updated.
                raise MemostoreError(
                    f"a hit of {self.symbol} failed while putting the stored post-call state "
                    f"into its arguments ({type(exc).__name__}: {exc}); they may be partly "
                    "updated: restart from a known state, or call with @memo(...) removed"
                ) from exc
            last_use.note_use(store, hit.evaluation_id, hit=True)
            if verbose.enabled():
                verbose.report_hit(self.symbol, hit.evaluation_id, hit.body, hit.rng_note)
            return result
        with flight or contextlib.nullcontext():
            # The lease (if held) goes once the evaluation is recorded, result or failure.
            if verbose.enabled():
                verbose.report_miss(self.symbol, call.key, hit or self._miss_reason(store, call))
            elif hit == "":
                recording.name_weight_miss(store, call)  # no stored call of this key at all
            result = self._compute(store, call, args, kwargs)
            if call.stored is not None and verbose.enabled():
                verbose.report_stored(self.symbol, call.stored.id, call.stored.body)
            return result

    def _miss_reason(self, store: Store, call: KeyedCall) -> str:
        try:
            from ..inspect.comparison import miss_reason

            return miss_reason(
                store,
                self.symbol,
                call.args_id,
                call.code.digest,
                call.code_doc,
                docs=call.sink.docs,
                settings=call.settings,
            )
        except Exception as exc:  # a reason is a courtesy: never fail the call for it
            return f"no stored call with this key ({type(exc).__name__})"

    def _prepare_hit(
        self,
        store: Store,
        evaluation_id: str,
        call: KeyedCall,
        track_rng: bool | None = None,
        exactly: bool = False,
    ) -> hits.Hit | None:
        """The planned hit of *evaluation_id* (or of the one its RNG condition names).

        *exactly*: None when the RNG condition names another evaluation.
        """
        track_rng = self._track_rng if track_rng is None else track_rng
        body = store.evaluation(evaluation_id).body
        note = ""
        if (track_rng and body.get("rng")) or body.get("environ") or body.get("files"):
            found, body, note = rng_conditions.matching_evaluation(
                store,
                evaluation_id,
                body,
                self.symbol,
                call.key,
                self._rng_mode if track_rng else "ignore",
            )
            if exactly and found != evaluation_id:
                return None
            evaluation_id = found
        # Heal before the decode: the restore ends by starting the background check
        # of mapped tensors (torch_codecs), which then shares the machine with
        # whatever this call still does.
        hit = hits.prepare(
            store,
            evaluation_id,
            body,
            call.watched,
            track_rng,
            before_decode=lambda b: self._heal(store, call, b),
            remember=_remember_restored,
        )
        hit.rng_note = note
        return hit

    def _restore(
        self, store: Store, ref: str, call: KeyedCall, seen: list[str | None] | None = None
    ) -> hits.Hit | str:
        """The hit for *call*, fully planned (nothing changed yet), or why it misses.

        The reason is "" when there is no stored call of this key at all. *seen*,
        if given, receives what the ref named (None: nothing).
        """
        try:
            evaluation_id = store.refs.read(ref)
        except MemostoreError as exc:
            if seen is not None:
                seen.append(_DAMAGED_REF)
            _warn(f"ignoring damaged ref {ref}: {exc}")
            return "its ref is damaged"
        if seen is not None:
            seen.append(evaluation_id)
        if evaluation_id is None:
            # A local miss: a remote configured with auto-fetch may know this call.
            from ..remote import fetch_on_miss

            evaluation_id = fetch_on_miss(store, ref)
            if evaluation_id is None:
                return ""
        try:
            try:
                return self._prepare_hit(store, evaluation_id, call)
            except ObjectNotFound:
                # Another process may have replaced the evaluation and gc freed the
                # old one between our two reads: read the ref again, once.
                newer = store.refs.read(ref)
                if newer is None or newer == evaluation_id:
                    raise
                return self._prepare_hit(store, newer, call)
        except hits.NotUsable as exc:
            if exc.warn:
                self._warn_unusable(f"the stored result is not used: {exc}")
            return exc.reason
        except UntrustedCode as exc:
            # Before StaleCode, its base: the reason must not blame a code change the
            # user cannot find.
            self._warn_unusable(str(exc))
            fix = f"; {exc.fix}" if exc.fix else ""
            return f"the stored value is untrusted: it needs {exc.symbol}{fix}"
        except StaleCode as exc:
            return f"code a stored value needs has changed ({exc})"
        except ObjectNotFound as exc:
            self._warn_unusable(f"the stored result is incomplete ({exc})")
            return "the stored result is incomplete"
        except (DecodeError, MemostoreError, ValueError) as exc:
            self._warn_unusable(f"the stored result cannot be restored ({exc})")
            # The warning is said once per kind; the miss line names each call's reason.
            return f"the stored result cannot be restored ({exc})"

    def _warn_unusable(self, message: str) -> None:
        """Say why a stored result is not used: once per function and message, at the
        user's call (every later call that meets the same reason computes quietly, as
        verbose says; another damaged object, another class, is said anew)."""
        text = message.removeprefix("memostore: ")
        warn_once(("unusable", self.symbol, text), f"{self.symbol}: {text}; recomputing")

    def _restore_if_moved(
        self, store: Store, ref: str, call: KeyedCall, seen: list[str | None]
    ) -> hits.Hit | str:
        """:meth:`_restore`, unless the ref still names what the first lookup found.

        The look again once this call holds the lease: only a result another
        process published meanwhile can answer it, and an evaluation that could
        not be used a moment ago (damaged, another RNG state) must not be tried,
        and warned about, twice.
        """
        if seen:
            try:
                now = store.refs.read(ref)
            except MemostoreError:
                now = _DAMAGED_REF
            if now == seen[0]:
                return "the stored call is unchanged"
        return self._restore(store, ref, call)

    def _heal(self, store: Store, call: KeyedCall, body: dict[str, Any]) -> None:
        """Write back what a hit's evaluation lacks: its arguments' objects or code document.

        A hit reads the result only. When a reader found one of the evaluation's
        other objects damaged (and moved it to quarantine), or it was deleted,
        this call holds it in memory and writes it again. Costs a stat per object
        of the arguments, once per evaluation and process (later hits of it skip the
        check); never raises (a read-only store serves hits all the same).
        """
        checked = (store.root, body.get("args"), body.get("code"))
        if checked in self._healed:
            return
        if len(self._healed) >= _HEALED_MAX:
            self._healed.clear()
        self._healed.add(checked)
        objects = store.objects
        sink = call.sink
        try:
            if not all(map(objects.contains, (*sink.docs, *sink.blobs, *sink.required))):
                sink.flush(objects)
            code_id = body.get("code")
            if code_id and not objects.contains(code_id):
                doc = call.code_doc
                if doc.id == code_id:
                    objects.add_doc(doc)
        except Exception:
            return

    def _compute(
        self,
        store: Store,
        call: KeyedCall,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        body: Callable[..., Any] | None = None,
        writer: recording.ResultWriter | None = None,
    ) -> Any:
        ctx = context.EvalContext(
            store=store,
            function=self.symbol,
            key=call.key,
            hparams=scalar_hparams(dict(call.arguments)),
            about=call_about(call),
        )
        storable = True
        try:
            # Roots first: gc keeps everything reachable from them (what is already
            # present among the arguments included) while they are written.
            store.mark_pending(ctx.run_id, [call.args_id, call.code_doc.id])
            call.sink.flush(store.objects)
            self._write_code_doc(store, call)
        except Exception as exc:
            storable = False
            with contextlib.suppress(OSError):
                store.clear_pending(ctx.run_id)
            _warn(
                f"cannot store the arguments of {self.symbol} ({exc}){_fix(exc, store)}; "
                "running unstored"
            )
        if storable:
            call.layout = identity.layout(call.watched.items)
        observed = reads.begin(store.root) if storable else None
        rng_frame = draws.begin() if self._track_rng and storable else None
        token = context.enter(ctx)
        if ctx.store.root is not None:
            _list_as_running(ctx)
        started = time.time()
        t0 = time.perf_counter()
        try:
            result = (body or self._fn)(*args, **kwargs)
        except BaseException as exc:
            context.leave(token)
            if rng_frame is not None:
                draws.end(rng_frame)
            if observed is not None:
                reads.drop(observed)
            status = "error" if isinstance(exc, Exception) else "interrupted"
            if storable and not isinstance(exc, GeneratorExit):
                duration = time.perf_counter() - t0
                recording.record_failure(store, call, ctx, exc, status, started, duration)
                with contextlib.suppress(OSError):
                    store.clear_pending(ctx.run_id)
            ctx.finalize(status)  # done already if recorded; else its journal would stay
            raise
        context.leave(token)
        duration = time.perf_counter() - t0
        if observed is not None:
            call.reads = reads.end(observed)
        if storable:
            rng_used = draws.end(rng_frame) if rng_frame is not None else {}
            try:
                recording.store_result(
                    store, call, ctx, result, started, duration, rng_used, writer
                )
            except (KeyboardInterrupt, SystemExit) as exc:
                # Ctrl-C while the result is written: nothing is published, and the
                # record says so, with the body's own duration (store_result warns
                # about, and returns from, every Exception).
                if call.stored is None:
                    recording.record_failure(
                        store, call, ctx, exc, "interrupted", started, duration
                    )
                    with contextlib.suppress(OSError):
                        store.clear_pending(ctx.run_id)
                raise
            if call.stored is not None:
                _remember_stored(result, call.stored.id)
            with contextlib.suppress(OSError):
                store.clear_pending(ctx.run_id)
        else:
            ctx.finalize("ok")
        return result

    def _write_code_doc(self, store: Store, call: KeyedCall) -> None:
        marker = (str(store.root), call.code.digest)
        if marker in self._code_docs_written:
            return
        store.objects.add_doc(call.code_doc)
        self._code_docs_written.add(marker)


def _list_as_running(ctx: context.EvalContext) -> None:
    """Open the call's metric journal now, so that other processes list it as running."""
    try:
        attach.begin(ctx)
    except Exception:
        # A courtesy: the call goes on. If it logs, opening the journal is
        # tried again and a failure warns there.
        return


def _watched(arguments: list[tuple[str, Any]], code: Any, skipped: set[str]) -> Watched:
    """The arguments, then the data globals the code reads (keyed like arguments)."""
    data_globals = getattr(code, "data_globals", ())
    if not data_globals:
        return Watched(arguments)
    items = list(arguments)
    where: dict[str, Any] = {}
    for g in data_globals:
        if g.symbol in skipped:
            continue
        where[g.symbol] = (g.namespace, g.name)
        value = g.namespace.get(g.name, MISSING)
        if value is not MISSING:
            items.append((g.symbol, value))
    return Watched(items, where)


class MemoSeam:
    """What a process-group runner (:mod:`memostore.distributed`) may use of a memoised function.

    The runner makes one call together with the job's other ranks; the look-up,
    the hit's plan, the miss's computation and its recording stay here, so a
    call goes through the same code whether one process makes it or a job.
    """

    def __init__(self, fn: MemoizedFunction) -> None:
        self._fn = fn

    @property
    def symbol(self) -> str:
        return self._fn.symbol

    @property
    def mode(self) -> str:
        """``@memo(distributed=...)``."""
        return self._fn._distributed

    @property
    def wait(self) -> bool | float:
        """``@memo(wait=...)``: single-flight, and for how long."""
        return self._fn._wait

    @property
    def track_rng(self) -> bool:
        """Whether the global RNGs the body draws from condition and follow the call."""
        return self._fn._track_rng

    def restore(
        self, store: Store, ref: str, call: KeyedCall, seen: list[str | None] | None = None
    ) -> hits.Hit | str:
        """The planned hit of the evaluation *ref* names, or why the call misses."""
        return self._fn._restore(store, ref, call, seen)

    def restore_if_moved(
        self, store: Store, ref: str, call: KeyedCall, seen: list[str | None]
    ) -> hits.Hit | str:
        """:meth:`restore`, unless *ref* still names what the first look-up found."""
        return self._fn._restore_if_moved(store, ref, call, seen)

    def plan_hit(
        self, store: Store, evaluation_id: str, call: KeyedCall, track_rng: bool
    ) -> hits.Hit | None:
        """The planned hit of exactly *evaluation_id*; None if its RNG condition does not hold.

        Raises what a look-up meets (ObjectNotFound: this store lacks it).
        """
        return self._fn._prepare_hit(store, evaluation_id, call, track_rng, exactly=True)

    def compute(
        self,
        store: Store,
        call: KeyedCall,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        body: Callable[..., Any] | None = None,
        writer: Any = None,
    ) -> Any:
        """Run the body (or *body*) as a miss and record it; its result."""
        return self._fn._compute(store, call, args, kwargs, body=body, writer=writer)

    def run_body(self, *args: Any, **kwargs: Any) -> Any:
        """The undecorated function, called: nothing looked up, nothing stored."""
        return self._fn._fn(*args, **kwargs)


def _refuse_deferred(fn: Callable[..., Any]) -> None:
    """Refuse a function whose call returns before its body runs: nothing to store."""
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        kind, made = "a generator function", "a generator"
        instead = "a list (the materialised value), and iterate over what it returns"
        if inspect.isasyncgenfunction(fn):
            kind, made = "an async generator function", "an async generator"
    elif inspect.iscoroutinefunction(fn):
        kind, made = "an async def function", "a coroutine"
        instead = "its value (the materialised value), and call it from the coroutine"
    else:
        return
    raise MemostoreError(
        f"@memo cannot memoise {getattr(fn, '__qualname__', fn)}, {kind}: a call returns "
        f"{made} before the body runs, so there is no result to store. Memoise a plain "
        f"def helper that returns {instead}"
    )


def _remember_restored(decoder: Decoder, evaluation_id: str) -> None:
    """Restored objects enter the caches with the digest from the store: no re-hash."""
    for obj, doc_id in decoder.restored:
        codec = decoder.codecs.for_type(type(obj))
        if codec is not None:
            fingerprint = codec.fingerprint(obj)
            if fingerprint is not None:
                digest_cache.put(obj, fingerprint, doc_id)
        # As for a result computed: the pieces of a restored container name it too.
        lineage_cache.put_tree(obj, evaluation_id)


def _remember_stored(result: Any, evaluation_id: str) -> None:
    lineage_cache.put_tree(result, evaluation_id)


@overload
def memo(fn: Callable[P, R]) -> MemoizedFunction[P, R]: ...


@overload
def memo(
    fn: None = None,
    *,
    ignore: Iterable[str] = (),
    files: Iterable[str] = (),
    version: str | int | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    rng: str = "lineage",
    wait: bool | float = True,
    distributed: str = "all",
) -> Callable[[Callable[P, R]], MemoizedFunction[P, R]]: ...


def memo(
    fn: Callable[..., Any] | None = None,
    *,
    ignore: Iterable[str] = (),
    files: Iterable[str] = (),
    version: str | int | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    rng: str = "lineage",
    wait: bool | float = True,
    distributed: str = "all",
) -> Any:
    """Memoise a function in the store.

    Use as ``@memo``, ``@memo()`` or ``@memo(ignore=("writer",), version="2")``.

    Args:
        fn: the function (when used without parentheses).
        ignore: parameter names left out of the call key (loggers, devices, ...).
        files: parameter names keyed by the content of the file or directory tree
            their argument names (a str, os.PathLike, or a list or tuple of them),
            not by the name (``docs/concepts.md``, "Files and directories").
        version: an explicit salt; change it to invalidate every stored result.
        store: a :class:`Store` or path; default :meth:`Store.default` at call time.
        rng: for a body that draws from a global RNG (torch's, numpy's, ``random``'s):
            ``"lineage"`` (default): an RNG the program seeded must be in the state
            the stored call started from, an unseeded one matches any stored run;
            ``"exact"``: every such RNG must be in the recorded start state;
            either way a hit leaves each RNG where the stored body left it.
            ``"ignore"``: global RNGs are neither checked nor set by a hit.
        wait: single-flight (``docs/clusters.md``): a miss on a call that another
            live process (or thread) is computing waits for its result and returns
            it as a hit. True (default): wait as long as that caller lives; a
            number: wait at most that many seconds, then compute; False: compute
            at once, as if no one else were.
        distributed: inside an initialised torch.distributed job (``docs/clusters.md``):
            ``"all"`` (default): one hit-or-miss decision for every rank; on a miss
            every rank runs the body (it may hold collectives), and a result equal on
            every rank is stored once, one that differs by rank per rank (each rank
            restores its own); ``"leader"``: rank 0 alone runs a miss, the other ranks receive
            its result; ``"per_rank"``: each rank's call is its own, keyed with its
            rank and the world size.

    Returns:
        A :class:`MemoizedFunction` typed as the function (same parameters and
        return type), with its name and docstring, ``__wrapped__``,
        ``.key(*args, **kwargs)`` and ``.lookup(*args, **kwargs)``.

    Raises:
        MemostoreError: *fn* is a generator or ``async def`` function, whose
            calls return before the body runs (nothing to store).
    """
    if isinstance(ignore, str):
        ignore = (ignore,)
    if isinstance(files, str):
        files = (files,)
    version_text = None if version is None else str(version)

    def wrap(f: Callable[P, R]) -> MemoizedFunction[P, R]:
        return MemoizedFunction(
            f,
            ignore=ignore,
            files=files,
            version=version_text,
            store=store,
            rng=rng,
            wait=wait,
            distributed=distributed,
        )

    if fn is not None:
        return wrap(fn)
    return wrap
