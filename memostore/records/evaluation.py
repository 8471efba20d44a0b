"""Evaluation records: what ran, on which arguments and code, with what outcome.

An evaluation document's body (``docs/format.md``)::

    function   symbol of the memoised function ("module:qualname", "run:<script>")
    key        the call key (null for runs)
    code       id of the code document (dependency closure with sources)
    code_digest, version
    args       id of the arguments document
    hparams    scalar arguments, by name
    args_summary  short text per argument, for listings
    result     id of the result value document (null unless status is "ok"); a result
               that differs by rank is a per-rank value (values/rank_results.py)
    result_summary
    status     "ok" | "error" | "interrupted"
    error      {"type", "message", "traceback"} or null
    started, duration_s
    provenance {host, python, platform, packages, git, pid, argv, cwd}
    parents    ids of evaluations whose results were passed in
    payloads   code digest -> blob id of code stored by value
    logs       id of the logs document (metrics), or null
    effects    argument or data global name -> id of the value document of its
               state after the call, for those the body changed (absent if none)
    rebound    names of data globals the body bound to another object (absent if none)
    aliases    result path -> argument name, where the result is an argument itself
               (read only without ``identity``)
    identity   where the body bound anew, moved, shared or viewed objects
               (``effects/identity.py``)
    settings   process settings in the key (``effects/process.py``)
    environ    environment variables the body read -> value (null: unset)
    rng        RNG name -> {"before": digest of the state the body started from,
               "after": blob id of the state it left, "seeded": whether the program
               had seeded it, "leaves": the lineage the body's seeding left}, for
               global RNGs it drew from
"""

from __future__ import annotations

import traceback as tb_module
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreWarning
from ..odb.objects import (
    KIND_CODE,
    KIND_EVALUATION,
    Doc,
    Links,
    canonical_json,
    digest_bytes,
    fits_json_int,
)
from ..odb.refs import ref_part

if TYPE_CHECKING:
    from ..odb.store import Store
    from .context import EvalContext

_SUMMARY_MAX = 80


KEY_PREFIX = b"memostore:key:1\n"


def call_key(
    function: str,
    code_digest: str,
    args_id: str,
    version: str | None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The call key: a digest of what determines the result (``docs/format.md``)."""
    return key_with(key_tail(function, version, settings), code_digest, args_id)


def key_tail(
    function: str, version: str | None, settings: Mapping[str, Any] | None = None
) -> bytes:
    """The canonical JSON of the key's payload from "function" on.

    Constant per memoised function (and process settings), so a call only
    formats the two digests in front of it. *settings* are the process-wide
    settings that differ from their defaults (``effects/process.py``); with
    none, the key is what it was before settings were keyed.
    """
    fields: dict[str, Any] = {"function": function, "version": version}
    if settings:
        fields["settings"] = dict(settings)
    payload = canonical_json(fields)
    return b"," + payload[1:]


def key_with(tail: bytes, code_digest: str, args_id: str) -> str:
    head = f'{{"args":"{args_id}","code":"{code_digest}"'.encode("ascii")
    return digest_bytes(KEY_PREFIX + head + tail)


def code_doc(info: Any) -> Doc:
    """The code document of a function: its closure, every dependency with its source."""
    deps = [
        {"symbol": d.symbol, "kind": d.kind, "digest": d.digest, "source": d.source}
        for _, d in sorted(info.deps.items())
    ]
    return Doc(KIND_CODE, {"symbol": info.symbol, "digest": info.digest, "deps": deps})


def summarize(value: Any) -> str:
    """A one-line description of a value for listings (never reads bulk data)."""
    if type(value) is int and not fits_json_int(value):
        text = _big_int_text(value)
    elif value is None or isinstance(value, (bool, int, float, complex, str)):
        text = repr(value)
    else:
        shape = getattr(value, "shape", None)
        dtype = getattr(value, "dtype", None)
        name = type(value).__qualname__
        if shape is not None and dtype is not None:
            text = f"{name}({str(dtype).replace('torch.', '')}, {list(shape)})"
        elif isinstance(value, (list, tuple, dict, set, frozenset)):
            text = f"{name}(len={len(value)})"
        else:
            try:
                size = len(value)
            except Exception:
                size = None
            text = f"{name}(len={size})" if size is not None else name
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 1] + "…"


def _big_int_text(value: int) -> str:
    return f"int of {value.bit_length()} bits"


def scalar_hparams(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar arguments of a call (its hyper-parameters), JSON-safe."""
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        if type(value) is int and not fits_json_int(value):
            out[name] = _big_int_text(value)  # too long for a JSON number
        elif value is None or isinstance(value, (bool, int, str)):
            out[name] = value
        elif isinstance(value, float):
            out[name] = value if value == value and abs(value) != float("inf") else repr(value)
    return out


def error_record(exc: BaseException) -> dict[str, str]:
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "traceback": "".join(tb_module.format_exception(type(exc), exc, exc.__traceback__)),
    }


def evaluation_doc(fields: dict[str, Any], links: Links) -> Doc:
    """Build the evaluation document; linked ids in *fields* join *links*."""
    links = Links(set(links.docs), set(links.blobs))
    for name in ("code", "args", "result", "logs"):
        if fields.get(name):
            links.docs.add(fields[name])
    links.docs.update(fields.get("parents", ()))
    links.docs.update((fields.get("effects") or {}).values())
    links.blobs.update(fields.get("payloads", {}).values())
    links.blobs.update(r["after"] for r in (fields.get("rng") or {}).values())
    return Doc(KIND_EVALUATION, fields, links)


def eval_ref_name(function: str, key: str) -> str:
    return f"evals/{ref_part(function)}/{key}"


def failed_ref_name(function: str, key: str) -> str:
    return f"failed/{ref_part(function)}/{key}"


def record_run(ctx: EvalContext, status: str) -> str | None:
    """Record a standalone run (metrics logged outside any memoised call)."""
    import time

    from .provenance import provenance

    try:
        extra = ctx.finalize(status)
        if not extra.get("logs"):
            return None  # nothing was logged: a run with no content is not worth a record
        fields = {
            "function": ctx.function,
            "key": None,
            "code": None,
            "code_digest": None,
            "version": None,
            "args": None,
            "hparams": ctx.hparams,
            "args_summary": {},
            "result": None,
            "result_summary": None,
            "status": status,
            "error": None,
            "started": ctx.started,
            "duration_s": time.time() - ctx.started,
            "provenance": provenance(None),
            "parents": [],
            "payloads": {},
            **extra,
        }
        doc = evaluation_doc(fields, ctx.links)
        ctx.store.objects.add_doc(doc)
        ctx.store.objects.sync()
        script = ctx.function.split(":", 1)[-1]
        ctx.store.refs.set(f"runs/{ref_part(script)}/{doc.id}", doc.id)
        from ..odb import index

        index.record(ctx.store, doc.id, doc.body)
        return doc.id
    except Exception as exc:
        warnings.warn(
            f"memostore: could not record run {ctx.function}: {exc}", MemostoreWarning, stacklevel=2
        )
        return None


@dataclass(frozen=True)
class Evaluation:
    """A read-only view of one stored evaluation."""

    store: Store
    id: str
    doc: Doc

    @classmethod
    def load(cls, store: Store, evaluation_id: str) -> Evaluation:
        return cls(store, evaluation_id, store.evaluation(evaluation_id))

    def _get(self, name: str, default: Any = None) -> Any:
        return self.doc.body.get(name, default)

    @property
    def function(self) -> str:
        return self._get("function")

    @property
    def key(self) -> str | None:
        return self._get("key")

    @property
    def status(self) -> str:
        return self._get("status")

    @property
    def created(self) -> float:
        return self._get("started")

    @property
    def duration_s(self) -> float:
        return self._get("duration_s")

    @property
    def parents(self) -> list[str]:
        return list(self._get("parents", []))

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self._get("hparams", {}))

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self._get("provenance", {}))

    @property
    def error(self) -> dict[str, Any] | None:
        return self._get("error")

    @property
    def result_id(self) -> str | None:
        return self._get("result")

    @property
    def logs_id(self) -> str | None:
        return self._get("logs")

    @property
    def effects(self) -> dict[str, str]:
        """Argument (or data global) name -> value id of its state after the call,
        for those the body changed; a hit puts these states into the caller's objects."""
        return dict(self._get("effects") or {})

    @property
    def rng(self) -> dict[str, dict[str, str]]:
        """The global RNGs the body drew from: name -> {"before", "after"} (see hits.py)."""
        return dict(self._get("rng") or {})

    def load_result(self) -> Any:
        """The stored result, restored as fresh objects (digest-pinned code is checked).

        A result stored per rank by a job is restored as this process's rank's
        (``values/rank_results.py``).
        """
        from ..values.decoding import Decoder
        from ..values.rank_results import decode_result

        if self.result_id is None:
            raise ValueError(f"evaluation {self.id[:12]} has no result (status {self.status})")
        return decode_result(Decoder(self.store.objects, self._get("payloads", {})), self.result_id)

    def load_args(self) -> dict[str, Any]:
        """The arguments the call was made with, restored."""
        from ..values.decoding import Decoder

        args_id = self._get("args")
        if args_id is None:
            return {}
        return dict(Decoder(self.store.objects, self._get("payloads", {})).decode_mapping(args_id))

    def __repr__(self) -> str:
        return f"<Evaluation {self.id[:12]} {self.function} {self.status}>"
