"""The ``@memo`` decorator: key a call, return the stored result or compute and store it.

Call flow:

1. bind the arguments, apply defaults, drop ``ignore``-d ones;
2. key = digest(function symbol, code digest of its dependency closure,
   digest of the arguments, ``version``);
3. ``refs/evals/<function>/<key>`` names the evaluation; restore its result
   (fresh objects). A missing, corrupt or stale (code changed) result is a miss;
4. on a miss, store the arguments, run the body inside an evaluation context
   (for logging), store the result, then publish the ref: the ref is written
   last, so a crash at any point leaves the previous state intact;
5. a failure to store warns (:class:`MemostoreWarning`) and returns the result.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import os
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

from . import context, index
from .decoding import Decoder
from .encoding import Encoder, HashSink, StoreSink
from .errors import (
    DecodeError,
    EncodeError,
    MemostoreError,
    MemostoreWarning,
    ObjectNotFound,
    StaleCode,
)
from .evaluation import (
    Evaluation,
    code_doc,
    error_record,
    eval_ref_name,
    evaluation_doc,
    failed_ref_name,
    scalar_hparams,
    summarize,
)
from .hashcache import digest_cache, lineage_cache
from .objects import Doc, canonical_json, digest_bytes
from .provenance import provenance
from .store import Store

F = TypeVar("F", bound=Callable[..., Any])

KEY_PREFIX = b"memostore:key:1\n"

_stores: dict[Path, Store] = {}
_stores_lock = threading.Lock()


def call_key(function: str, code_digest: str, args_id: str, version: str | None) -> str:
    """The call key: a digest of what determines the result (``docs/format.md``)."""
    return _key_with(_key_tail(function, version), code_digest, args_id)


def _key_tail(function: str, version: str | None) -> bytes:
    # The canonical JSON of the key's payload, from "function" on: constant per
    # memoised function, so a call only formats the two digests in front of it.
    payload = canonical_json({"function": function, "version": version})
    return b"," + payload[1:]


def _key_with(tail: bytes, code_digest: str, args_id: str) -> str:
    head = f'{{"args":"{args_id}","code":"{code_digest}"'.encode("ascii")
    return digest_bytes(KEY_PREFIX + head + tail)


class _FastBinder:
    """Binds arguments like ``inspect.Signature.bind`` + ``apply_defaults``, faster.

    Only for signatures made of plain positional-or-keyword parameters (the
    common case); anything else falls back to inspect, which also raises the
    exact TypeError Python would for a bad call.
    """

    def __init__(self, signature: inspect.Signature) -> None:
        params = list(signature.parameters.values())
        self.simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self.names = [p.name for p in params]
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.signature = signature

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if not self.simple or len(args) > len(self.names):
            return None
        bound = dict(zip(self.names, args, strict=False))
        for name, value in kwargs.items():
            if name in bound or name not in self.names:
                return None
            bound[name] = value
        if len(bound) != len(self.names):
            for name in self.names:
                if name not in bound:
                    if name not in self.defaults:
                        return None
                    bound[name] = self.defaults[name]
        return {name: bound[name] for name in self.names}


def _open_store(store: Store | str | os.PathLike[str] | None) -> Store:
    if isinstance(store, Store):
        return store
    from .store import default_store_path

    path = Path(store).expanduser().absolute() if store is not None else default_store_path()
    opened = _stores.get(path)
    if opened is None or not (path / "FORMAT").exists():
        opened = Store(path)
        with _stores_lock:
            _stores[path] = opened
    return opened


def _symbol(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def _warn(message: str) -> None:
    warnings.warn(f"memostore: {message}", MemostoreWarning, stacklevel=3)


# Hits whose arguments and code were checked in this process (see _heal), at most.
_HEALED_MAX = 1 << 16

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _fix(exc: BaseException, store: Store | None) -> str:
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


class MemoizedFunction:
    """A function whose calls are looked up in, and stored into, a store."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        ignore: Iterable[str] = (),
        version: str | None = None,
        store: Store | str | os.PathLike[str] | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@memo needs a function, got {fn!r}")
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        self._fn = fn
        self._signature = inspect.signature(fn)
        self._binder = _FastBinder(self._signature)
        self._ignore = frozenset(ignore)
        unknown = self._ignore - set(self._signature.parameters)
        if unknown:
            raise MemostoreError(
                f"@memo(ignore=...) names {sorted(unknown)}, which {fn.__qualname__} "
                f"does not take; its parameters are {list(self._signature.parameters)}"
            )
        self._version = None if version is None else str(version)
        self.version = self._version
        self._store = store
        self.symbol = _symbol(fn)
        self._key_tail = _key_tail(self.symbol, self._version)
        self._code_file = inspect.getsourcefile(fn) if hasattr(fn, "__code__") else None
        self._code_docs_written: set[tuple[str, str]] = set()
        self._healed: set[tuple[Any, ...]] = set()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<memo {self.symbol}>"

    # -- keys ---------------------------------------------------------------------------
    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        arguments = self._binder.bind(args, kwargs)
        if arguments is None:
            bound = self._signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
        if self._ignore:
            return [(k, v) for k, v in arguments.items() if k not in self._ignore]
        return list(arguments.items())

    def _code(self) -> Any:
        from .code_deps import code_info

        return code_info(self._fn)

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        arguments = self._bind(args, kwargs)
        code = self._code()
        sink = HashSink()
        encoder = Encoder(sink)
        args_id = encoder.encode_mapping(arguments)
        key = _key_with(self._key_tail, code.digest, args_id)
        return _Call(self, arguments, code, sink, encoder, args_id, key)

    def key(self, *args: Any, **kwargs: Any) -> str:
        """The hex call key of these arguments (the body does not run)."""
        return self._prepare(args, kwargs).key

    def lookup(self, *args: Any, **kwargs: Any) -> Evaluation | None:
        """The stored evaluation for these arguments, or None (the body does not run)."""
        call = self._prepare(args, kwargs)
        store = _open_store(self._store)
        evaluation_id = store.refs.read(eval_ref_name(self.symbol, call.key))
        if evaluation_id is None:
            return None
        try:
            return Evaluation.load(store, evaluation_id)
        except (ObjectNotFound, MemostoreError):
            return None

    # -- calls --------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            call = self._prepare(args, kwargs)
        except EncodeError as exc:
            raise EncodeError(f"cannot key a call of {self.symbol}: {exc}") from exc
        try:
            store = _open_store(self._store)
        except OSError as exc:
            _warn(
                f"cannot open the store for {self.symbol} ({exc}){_fix(exc, None)}; "
                "running unstored"
            )
            return self._fn(*args, **kwargs)
        ref = eval_ref_name(self.symbol, call.key)
        hit, result = self._restore(store, ref, call)
        if hit:
            return result
        return self._compute(store, call, args, kwargs)

    def _decode_evaluation(
        self, store: Store, evaluation_id: str, call: _Call | None
    ) -> tuple[Any, Any, Any]:
        """(record body, decoder, restored result); body None when it holds no result."""
        body = store.evaluation(evaluation_id).body
        if body.get("status") != "ok" or body.get("result") is None:
            return None, None, None
        if call is not None:
            # Before the decode: the restore ends by starting the background check
            # of mapped tensors (torch_codecs), which then shares the machine with
            # whatever this call still does.
            self._heal(store, call, body)
        decoder = Decoder(store.objects, body.get("payloads") or {})
        return body, decoder, decoder.decode_value(body["result"])

    def _restore(self, store: Store, ref: str, call: _Call | None = None) -> tuple[bool, Any]:
        try:
            evaluation_id = store.refs.read(ref)
        except MemostoreError as exc:
            _warn(f"ignoring damaged ref {ref}: {exc}")
            return False, None
        if evaluation_id is None:
            # A local miss: a remote configured with auto-fetch may know this call.
            from .remote import fetch_on_miss

            evaluation_id = fetch_on_miss(store, ref)
            if evaluation_id is None:
                return False, None
        try:
            try:
                body, decoder, result = self._decode_evaluation(store, evaluation_id, call)
            except ObjectNotFound:
                # Another process may have replaced the evaluation and gc freed the
                # old one between our two reads: read the ref again, once.
                newer = store.refs.read(ref)
                if newer is None or newer == evaluation_id:
                    raise
                evaluation_id = newer
                body, decoder, result = self._decode_evaluation(store, evaluation_id, call)
            if body is None:
                return False, None
        except StaleCode:
            return False, None  # code a stored value needs has changed: recompute
        except ObjectNotFound as exc:
            _warn(f"stored result of {self.symbol} is incomplete ({exc}); recomputing")
            return False, None
        except (DecodeError, MemostoreError, ValueError) as exc:
            _warn(f"cannot restore the stored result of {self.symbol} ({exc}); recomputing")
            return False, None
        _remember_restored(decoder, evaluation_id)
        return True, result

    def _heal(self, store: Store, call: _Call, body: dict[str, Any]) -> None:
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
        self, store: Store, call: _Call, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        ctx = context.EvalContext(
            store=store,
            function=self.symbol,
            key=call.key,
            hparams=scalar_hparams(dict(call.arguments)),
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
        token = context.enter(ctx)
        started = time.time()
        t0 = time.perf_counter()
        try:
            result = self._fn(*args, **kwargs)
        except BaseException as exc:
            context.leave(token)
            if storable and not isinstance(exc, GeneratorExit):
                status = "error" if isinstance(exc, Exception) else "interrupted"
                self._record_failure(store, call, ctx, exc, status, started, t0)
                with contextlib.suppress(OSError):
                    store.clear_pending(ctx.run_id)
            raise
        context.leave(token)
        duration = time.perf_counter() - t0
        if storable:
            self._store_result(store, call, ctx, result, started, duration)
            with contextlib.suppress(OSError):
                store.clear_pending(ctx.run_id)
        else:
            ctx.finalize("ok")
        return result

    def _base_fields(self, call: _Call, ctx: context.EvalContext, started: float) -> dict[str, Any]:
        distributions = tuple(
            d.symbol.split(":", 1)[1] for d in call.code.deps.values() if d.kind == "distribution"
        )
        return {
            "function": self.symbol,
            "key": call.key,
            "code": call.code_doc.id,
            "code_digest": call.code.digest,
            "version": self._version,
            "args": call.args_id,
            "hparams": ctx.hparams,
            "args_summary": {name: summarize(value) for name, value in call.arguments},
            "started": started,
            "provenance": provenance(self._code_file, distributions),
            "parents": sorted(call.encoder.parents),
        }

    def _store_result(
        self,
        store: Store,
        call: _Call,
        ctx: context.EvalContext,
        result: Any,
        started: float,
        duration: float,
    ) -> None:
        try:
            # Fields first (provenance may read the user's git repository): from the
            # first result object written to the ref's publication, only gc's grace
            # period keeps those objects, so that window stays as short as possible.
            fields = self._base_fields(call, ctx, started)
            sink = StoreSink(store.objects)
            encoder = Encoder(sink)
            try:
                result_id = encoder.encode_value(result)
            finally:
                sink.abort()  # a pack left by a failed encoding (none once it succeeded)
            payloads = {**call.encoder.payloads, **encoder.payloads}
            fields.update(
                result=result_id,
                result_summary=summarize(result),
                status="ok",
                error=None,
                duration_s=duration,
                payloads=dict(sorted(payloads.items())),
                logs=None,
            )
            fields.update(ctx.finalize("ok"))
            doc = _publish(store, fields, ctx, eval_ref_name(self.symbol, call.key))
        except Exception as exc:
            _warn(
                f"could not store the result of {self.symbol} ({type(exc).__name__}: {exc})"
                f"{_fix(exc, store)}; it is returned unstored and the next call will compute it "
                "again"
            )
            return
        _remember_stored(result, result_id, doc.id)

    def _record_failure(
        self,
        store: Store,
        call: _Call,
        ctx: context.EvalContext,
        exc: BaseException,
        status: str,
        started: float,
        t0: float,
    ) -> None:
        try:
            fields = self._base_fields(call, ctx, started)
            fields.update(
                result=None,
                result_summary=None,
                status=status,
                error=error_record(exc),
                duration_s=time.perf_counter() - t0,
                payloads=dict(sorted(call.encoder.payloads.items())),
                logs=None,
            )
            fields.update(ctx.finalize(status))
            _publish(store, fields, ctx, failed_ref_name(self.symbol, call.key))
        except Exception as record_exc:
            _warn(
                f"could not record the failure of {self.symbol}: {record_exc}"
                f"{_fix(record_exc, store)}"
            )

    def _write_code_doc(self, store: Store, call: _Call) -> None:
        marker = (str(store.root), call.code.digest)
        if marker in self._code_docs_written:
            return
        store.objects.add_doc(call.code_doc)
        self._code_docs_written.add(marker)


def _publish(store: Store, fields: dict[str, Any], ctx: context.EvalContext, ref_name: str) -> Doc:
    """Write the evaluation record, make everything durable, then point *ref_name* at it.

    The ref is written last: until then nothing names the new objects, so a crash
    at any earlier point leaves the store as it was (plus unreachable objects).
    """
    doc = evaluation_doc(fields, ctx.links)
    store.objects.add_doc(doc)
    store.objects.sync()
    store.refs.set(ref_name, doc.id)
    index.record(store, doc.id, doc.body)
    return doc


class _Call:
    """A keyed call: its arguments, code, key and what hashing them produced."""

    __slots__ = ("_code_doc", "args_id", "arguments", "code", "encoder", "fn", "key", "sink")

    def __init__(
        self,
        fn: MemoizedFunction,
        arguments: list[tuple[str, Any]],
        code: Any,
        sink: HashSink,
        encoder: Encoder,
        args_id: str,
        key: str,
    ) -> None:
        self.fn = fn
        self.arguments = arguments
        self.code = code
        self.sink = sink
        self.encoder = encoder
        self.args_id = args_id
        self.key = key
        self._code_doc: Doc | None = None

    @property
    def code_doc(self) -> Doc:
        """The code document of the function (built once: it hashes every source)."""
        if self._code_doc is None:
            self._code_doc = code_doc(self.code)
        return self._code_doc


def _remember_restored(decoder: Decoder, evaluation_id: str) -> None:
    """Restored objects enter the caches with the digest from the store: no re-hash."""
    for obj, doc_id in decoder.restored:
        codec = decoder.codecs.for_type(type(obj))
        if codec is not None:
            fingerprint = codec.fingerprint(obj)
            if fingerprint is not None:
                digest_cache.put(obj, fingerprint, doc_id)
        lineage_cache.put(obj, evaluation_id)


def _remember_stored(result: Any, result_id: str, evaluation_id: str) -> None:
    lineage_cache.put(result, evaluation_id)
    if isinstance(result, (tuple, list)):
        for item in result:
            lineage_cache.put(item, evaluation_id)
    elif isinstance(result, dict):
        for item in result.values():
            lineage_cache.put(item, evaluation_id)


@overload
def memo(fn: F) -> F: ...


@overload
def memo(
    fn: None = None,
    *,
    ignore: Iterable[str] = (),
    version: str | int | None = None,
    store: Store | str | os.PathLike[str] | None = None,
) -> Callable[[F], F]: ...


def memo(
    fn: Callable[..., Any] | None = None,
    *,
    ignore: Iterable[str] = (),
    version: str | int | None = None,
    store: Store | str | os.PathLike[str] | None = None,
) -> Any:
    """Memoise a function in the store.

    Use as ``@memo``, ``@memo()`` or ``@memo(ignore=("writer",), version="2")``.

    Args:
        fn: the function (when used without parentheses).
        ignore: parameter names left out of the call key (loggers, devices, ...).
        version: an explicit salt; change it to invalidate every stored result.
        store: a :class:`Store` or path; default :meth:`Store.default` at call time.

    Returns:
        A callable with the function's name and docstring, ``__wrapped__``,
        ``.key(*args, **kwargs)`` and ``.lookup(*args, **kwargs)``.
    """
    if isinstance(ignore, str):
        ignore = (ignore,)
    version_text = None if version is None else str(version)

    def wrap(f: Callable[..., Any]) -> Any:
        return MemoizedFunction(f, ignore=ignore, version=version_text, store=store)

    if fn is not None:
        return wrap(fn)
    return wrap
