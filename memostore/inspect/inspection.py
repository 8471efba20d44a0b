"""What ``memostore log`` and ``show`` display, as JSON-able dicts.

These functions read the store and return plain data; formatting belongs to the
CLI. Listings come from the refs and the evaluation index (never from bulk
data); ``show`` reads one evaluation, its code document and the small value
documents of its arguments and result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb import index
from ..odb.index import iso_time
from ..odb.objects import KIND_CODE
from ..odb.revisions import did_you_mean, find_function, listed_evaluations
from ..odb.tags import tags_naming
from ..records.names import call_arguments, display_names
from ..trust.signers import signer_info
from ..values.summaries import summarize_arguments, summarize_value

if TYPE_CHECKING:
    from ..metrics.live import LiveLogs
    from ..metrics.running import RunningEvaluation
    from ..odb.store import Store

METRIC_STATS = ("count", "first", "last", "min", "max")


def log_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One evaluation as ``memostore log --json`` lists it."""
    return {
        "id": entry["id"],
        "function": entry["function"],
        "status": entry.get("status"),
        "created": iso_time(entry.get("started")),
        "started": entry.get("started"),
        "duration_s": entry.get("duration_s"),
        "args": call_arguments(entry),
        "args_summary": dict(entry.get("args_summary") or {}),
        "parents": list(entry.get("parents") or []),
        "key": entry.get("key"),
        "result": entry.get("result_summary"),
        "error": entry.get("error"),
        "logs": entry.get("logs"),
        "run_name": entry.get("run_name"),
        "refs": list(entry.get("refs") or []),
    }


def log_records(
    store: Store, function: str | None = None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Evaluations named by refs, newest first, optionally of one function.

    Args:
        store: the store.
        function: a function name as a revision would give it (``train``,
            ``module:train``); None for all.

    Returns:
        (records, problems): problems maps evaluation ids that refs name but
        that cannot be read to the reason.

    Raises:
        RevisionNotFound: *function* names no recorded function, or several.
    """
    if function is None:
        listed, problems = listed_evaluations(store)
    else:
        from ..errors import RevisionNotFound

        symbol, listed, problems = find_function(store, function)
        if symbol is None:
            raise RevisionNotFound(
                f"no evaluations of a function named {function!r}"
                f"{did_you_mean(store, function)}; "
                "run `memostore log` to see the recorded functions"
            )
    records = [log_record(e) for e in listed]
    for record in records:
        record["signer"] = signer_info(store, record["id"])
    return records, problems


def metrics_of(store: Store, logs_id: str | None) -> tuple[dict[str, Any], str | None]:
    """The metric summary of a logs document: ({tag: stats}, error or None).

    Uses the metrics reader when it is installed; without it there are no metrics.
    """
    if not logs_id:
        return {}, None
    try:
        from ..metrics.read import metrics_summary
    except ImportError:
        return {}, None
    try:
        return dict(metrics_summary(store, logs_id)), None
    except (MemostoreError, OSError, ValueError, KeyError) as exc:
        return {}, f"{type(exc).__name__}: {exc}"


def code_record(store: Store, code_id: str | None, digest: str | None) -> dict[str, Any]:
    """The code of an evaluation: its digest and each dependency with its digest and kind."""
    record: dict[str, Any] = {"id": code_id, "digest": digest, "deps": {}, "dependencies": []}
    if not code_id:
        return record
    try:
        doc = store.objects.get_doc(code_id)
    except MemostoreError as exc:
        record["error"] = str(exc)
        return record
    if doc.kind != KIND_CODE:
        record["error"] = f"object {code_id} is a {doc.kind}, not code"
        return record
    record["symbol"] = doc.body.get("symbol")
    deps = sorted(doc.body.get("deps") or [], key=lambda d: str(d.get("symbol")))
    record["deps"] = {d["symbol"]: d.get("digest") for d in deps}
    record["dependencies"] = [
        {"symbol": d["symbol"], "kind": d.get("kind"), "digest": d.get("digest")} for d in deps
    ]
    return record


def effects_record(
    store: Store, effects: Mapping[str, str] | None, load_codecs: bool = True
) -> dict[str, Any]:
    """The state after the call of each argument the body mutated: {name: summary}.

    Data globals the body changed are named ``module:name``. Records made before
    effects were kept, and calls that mutated nothing, give ``{}``.
    """
    if not isinstance(effects, Mapping):
        return {}
    return {
        str(name): summarize_value(store.objects, doc_id, load_codecs)
        for name, doc_id in effects.items()
        if isinstance(doc_id, str)
    }


def rng_record(store: Store, rng: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The global RNGs the body drew from: {name: {"before", "after", "bytes", "seeded", "leaves"}}.

    ``before`` digests the state the body started from (None: the body seeded
    the RNG first), ``after`` is the blob of the state it left (a hit sets it),
    ``bytes`` its size; ``seeded`` says whether the program had seeded the RNG
    at the call (a seeded call hits only from ``before``, an unseeded one is
    served this run from any state; None in records made before lineages were
    kept), ``leaves`` the lineage the body's own seeding left it in (or None).
    """
    if not isinstance(rng, Mapping):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, entry in sorted(rng.items()):
        if not isinstance(entry, Mapping):
            continue
        after = entry.get("after")
        size = None
        if isinstance(after, str):
            try:
                size = store.objects.size_of(after)
            except (MemostoreError, OSError):
                size = None
        seeded = entry.get("seeded")
        out[str(name)] = {
            "before": entry.get("before"),
            "after": after,
            "bytes": size,
            "seeded": seeded if isinstance(seeded, bool) else None,
            "leaves": entry.get("leaves") if entry.get("leaves") in _LINEAGES else None,
        }
    return out


_LINEAGES = ("seeded", "unseeded")


def children_of(
    store: Store, evaluation_id: str, entries: Mapping[str, dict[str, Any]] | None = None
) -> list[str]:
    """Evaluations, as the index knows them, that list *evaluation_id* as a parent."""
    if entries is None:
        entries = index.load(store)
    children = [e for e in entries.values() if evaluation_id in (e.get("parents") or ())]
    children.sort(key=lambda e: (e.get("started") or 0.0, e["id"]))
    return [e["id"] for e in children]


def show_record(store: Store, evaluation_id: str, load_codecs: bool = True) -> dict[str, Any]:
    """Everything ``memostore show`` displays about one evaluation (no tensor data read).

    Args:
        store: the store.
        evaluation_id: the evaluation.
        load_codecs: let summaries load codec packages (see :mod:`memostore.values.summaries`);
            False keeps a command-line ``show`` fast (torch is not imported).
    """
    body = store.evaluation(evaluation_id).body
    entry = index.entry_from_body(evaluation_id, body)
    record = log_record(entry)
    record["args"] = summarize_arguments(store.objects, body.get("args"), load_codecs)
    record["hparams"] = dict(body.get("hparams") or {})
    record["args_summary"] = dict(body.get("args_summary") or {})
    record["version"] = body.get("version")
    record["code"] = code_record(store, body.get("code"), body.get("code_digest"))
    record["result_id"] = body.get("result")
    record["result"] = summarize_value(store.objects, body.get("result"), load_codecs)
    record["result_summary"] = body.get("result_summary")
    record["effects"] = effects_record(store, body.get("effects"), load_codecs)
    record["rebound"] = list(body.get("rebound") or [])
    record["aliases"] = dict(body.get("aliases") or {})
    record["rng"] = rng_record(store, body.get("rng"))
    record["error"] = body.get("error")
    metrics, metrics_error = metrics_of(store, body.get("logs"))
    record["metrics"] = metrics
    if metrics_error:
        record["metrics_error"] = metrics_error
    record["provenance"] = dict(body.get("provenance") or {})
    record["signer"] = signer_info(store, evaluation_id)
    entries = index.load(store)
    record["children"] = children_of(store, evaluation_id, entries)
    record["args_id"] = body.get("args")
    record["payloads"] = dict(body.get("payloads") or {})
    record["refs"] = refs_naming(store, evaluation_id, body)
    record["tags"] = tags_naming(store, evaluation_id)
    record["name"] = evaluation_name(store, record)
    if evaluation_id not in entries:
        # Index it while we hold it: later listings need not read it again.
        index.record(store, evaluation_id, body)
    return record


def evaluation_name(store: Store, record: Mapping[str, Any]) -> str:
    """The name of *record* among the recorded evaluations of its function (see :mod:`.names`).

    As ``memostore log FUNCTION`` names it: ``train lr=0.1`` where the
    function's evaluations differ in ``lr``, or its TensorBoard run's name.
    """
    function = record.get("function")
    try:
        listed, _ = listed_evaluations(store, functions=[function]) if function else ([], {})
    except MemostoreError:
        listed = []
    others = [log_record(e) for e in listed if e["id"] != record["id"]]
    mine = {**record, "args": call_arguments(record) if "hparams" in record else record["args"]}
    return display_names([mine, *others])[record["id"]]


def refs_naming(store: Store, evaluation_id: str, body: Mapping[str, Any]) -> list[str]:
    """The refs that name this evaluation, among those its record implies."""
    from ..odb.refs import ref_part
    from ..records.evaluation import eval_ref_name, failed_ref_name

    function, key = body.get("function"), body.get("key")
    candidates = []
    if isinstance(function, str) and isinstance(key, str):
        candidates += [eval_ref_name(function, key), failed_ref_name(function, key)]
    if isinstance(function, str) and function.startswith("run:"):
        candidates.append(f"runs/{ref_part(function.split(':', 1)[1])}/{evaluation_id}")
    named = []
    for name in candidates:
        try:
            if store.refs.read(name) == evaluation_id:
                named.append(name)
        except MemostoreError:
            continue
    return named


def running_show_record(run: RunningEvaluation, logs: LiveLogs | None = None) -> dict[str, Any]:
    """Everything ``memostore show`` displays about a running evaluation.

    The fields of a recorded evaluation's, with status ``running``, the
    metrics logged so far, and null or empty where there is nothing yet
    (result, effects, children).
    """
    header = run.header
    record = run.record()
    args_id = header.get("args") if isinstance(header.get("args"), str) else None
    if args_id and run.store.objects.contains(args_id):
        record["args"] = summarize_arguments(run.store.objects, args_id, False)
    code_id = header.get("code") if isinstance(header.get("code"), str) else None
    digest = header.get("code_digest") if isinstance(header.get("code_digest"), str) else None
    record.update(
        hparams=run.hparams,
        version=None,
        code=code_record(run.store, code_id, digest),
        result_id=None,
        result=None,
        result_summary=None,
        effects={},
        rebound=[],
        aliases={},
        rng={},
        metrics=(logs.summary() if logs is not None else {}),
        provenance=run.process,
        children=[],
        args_id=args_id,
        payloads={},
    )
    return record
