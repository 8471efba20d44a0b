"""Writing evaluations' logs as TensorBoard event files.

Each evaluation becomes one run directory, ``<logdir>/<name>``, named as the
evaluations exported together name each other (:mod:`memostore.records.names`):
TensorBoard's own run name for a writer's run (``lr0.1_seed4`` for
``runs/lr0.1_seed4``), else the function and the arguments that differ
(``train_lr=0.1``). Below it, the sub-runs torch's writer makes are laid out
as it lays them out: one per ``add_scalars`` key and one per ``add_hparams``
call (:func:`.runs.export_plan`). Each run holds one event file of the
evaluation (``events.out.tfevents.<time>.<host>.<pid>.<id prefix>.memostore``;
exporting again replaces it) with every point it logged, written as
``torch.utils.tensorboard``'s writer writes it (:mod:`.tb_media`): scalars as
float32 ``simple_value`` (tensors when logged ``new_style``), histograms,
images, text, audio, videos, PR curves, meshes, tensors, custom-scalar layouts
and graphs. Embeddings are written beside them, as the projector's files.
Events are in wall-time order across tags, each tag's in logged order.

Hyper-parameters (:mod:`.tb_hparams`): each ``add_hparams`` call is a session
of its own run, exactly as torch writes it, so TensorBoard's HParams tab shows
the same sessions for the export as for torch's files. An evaluation that
called ``add_hparams`` nowhere is one session of its main run instead, its
call's scalar arguments as hyper-parameters and its scalars as metrics.

Needs the ``tensorboard`` package (the ``tensorboard`` extra);
nothing else in memostore does.
"""

from __future__ import annotations

import heapq
import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError, install_hint
from ..odb.inside import join_beneath
from . import tb_hparams, tb_media
from .read import load_events, load_manifest, load_series
from .runs import export_plan, safe_dir

if TYPE_CHECKING:
    from ..odb.store import Store

INSTALL_HINT = install_hint("tensorboard")
_FILE_SUFFIX = ".memostore"


def _protos() -> SimpleNamespace:
    """TensorBoard's protobuf modules, or the error that says how to install them."""
    try:
        from google.protobuf import struct_pb2
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
        from tensorboard.plugins.hparams import metadata as hp_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter

        media = tb_media.protos()
    except ImportError as exc:
        raise MemostoreError(
            f"exporting to TensorBoard needs the tensorboard package: {INSTALL_HINT}"
        ) from exc
    return SimpleNamespace(
        event=event_pb2,
        summary=summary_pb2,
        tensor=tensor_pb2,
        shape=tensor_shape_pb2,
        api=api_pb2,
        plugin_data=plugin_data_pb2,
        hp_metadata=hp_metadata,
        struct=struct_pb2,
        RecordWriter=RecordWriter,
        media=media,
    )


def require_tensorboard() -> None:
    """Raise :class:`MemostoreError` with the install hint if tensorboard is missing."""
    _protos()


def run_dirs(names: dict[str, str], functions: dict[str, str]) -> dict[str, str]:
    """The directory (relative to the export's) of each evaluation, from its display name.

    Args:
        names: evaluation id -> display name (:func:`memostore.records.names.display_names`).
        functions: evaluation id -> function, for a name that leaves no directory.
    """
    out: dict[str, str] = {}
    for evaluation_id, name in names.items():
        parts = [p.strip("_") for p in safe_dir(name.replace(" ", "_")).split("/")]
        where = "/".join(p for p in parts if p not in ("", ".", ".."))
        if not where:
            short = re.sub(r"[^A-Za-z0-9._-]+", "_", functions[evaluation_id]).strip("._")
            where = f"{short or 'evaluation'}-{evaluation_id[:12]}"
        elif where in out.values():
            where = f"{where}_{evaluation_id[:8]}"  # two names that differ only in odd characters
        out[evaluation_id] = where
    return out


def export_tensorboard(
    store: Store, evaluation_ids: Sequence[str], logdir: str | Path
) -> list[Path]:
    """Write one TensorBoard run per evaluation under *logdir*; the run directories.

    Raises:
        MemostoreError: tensorboard is not installed, or an evaluation has no logs.
    """
    p = _protos()
    from ..records.evaluation import Evaluation
    from ..records.names import call_arguments, display_names

    evaluations = []
    for evaluation_id in dict.fromkeys(evaluation_ids):
        evaluation = Evaluation.load(store, evaluation_id)
        if not evaluation.logs_id:
            raise MemostoreError(
                f"evaluation {evaluation_id[:12]} ({evaluation.function}) logged no metrics"
            )
        evaluations.append(evaluation)
    records = [
        {
            "id": e.id,
            "function": e.function,
            "args": call_arguments(e.doc.body),
            "run_name": e.doc.body.get("run_name"),
        }
        for e in evaluations
    ]
    where = run_dirs(display_names(records), {e.id: e.function for e in evaluations})
    out: list[Path] = []
    # Every directory is checked before anything is written: a refused name writes nothing.
    targets = {e.id: join_beneath(logdir, where[e.id]) for e in evaluations}
    for evaluation in evaluations:
        run_dir = targets[evaluation.id]
        _write_runs(p, store, evaluation, run_dir)
        out.append(run_dir)
    return out


def _write_runs(p: SimpleNamespace, store: Store, evaluation: Any, run_dir: Path) -> None:
    """One directory per run of the evaluation, laid out as TensorBoard's writer did."""
    body = load_manifest(store, evaluation.logs_id)
    started = float(evaluation.created or time.time())
    plan = export_plan(body)
    # As torch's writer: each add_hparams call is a session of its own run, and only
    # those; an evaluation without any is a session of its main run.
    called = any(sessions for _, _, sessions in plan)
    wheres = {sub: join_beneath(run_dir, sub) if sub else run_dir for sub, _, _ in plan}
    for sub, names, sessions in plan:
        first: list[tuple[float, Any]] = []
        if not sub and not called:
            first = tb_hparams.evaluation_events(p, store, evaluation, started, names)
        for session in sessions:
            first.extend(tb_hparams.session_events(p, session))
        _write_one(p, store, evaluation, body.get("tags", {}), wheres[sub], names, first, started)


def _write_one(
    p: SimpleNamespace,
    store: Store,
    evaluation: Any,
    entries: dict[str, Any],
    directory: Path,
    names: dict[str, str],
    first: list[tuple[float, Any]],
    started: float,
) -> None:
    """Write one run: the points of *names* (name -> the tag shown), after *first*."""
    logs_id = evaluation.logs_id
    mine = f".{evaluation.id[:12]}{_FILE_SUFFIX}"
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"events.out.tfevents.*{mine}"):
        # A re-export replaces this evaluation's earlier file: never the user's
        # files, nor another evaluation's that shares the run.
        old.unlink()
    file_name = (
        f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        f".{evaluation.id[:12]}"
    )
    embeddings: list[tuple[float, int, str, dict[str, Any]]] = []
    streams: list[Iterator[tuple[float, Any]]] = [iter(first)]
    for name, tag in names.items():
        entry = entries[name]
        if entry["kind"] == "embedding":
            for point in load_events(store, logs_id, name):
                embeddings.append((point["wall"], len(embeddings), tag, point))
            continue
        streams.append(_tag_events(p, store, logs_id, name, tag, entry))
    with open(directory / (file_name + _FILE_SUFFIX), "wb") as f:
        writer = p.RecordWriter(f)
        writer.write(
            p.event.Event(wall_time=started, file_version="brain.Event:2").SerializeToString()
        )
        # In wall-time order across tags, as they were logged (each tag keeps its
        # own order): TensorBoard drops a tag's points logged after a later step
        # by their position in the file, so the order decides what it shows.
        for _, event in heapq.merge(*streams, key=lambda item: item[0]):
            writer.write(event.SerializeToString())
        writer.flush()
    embeddings.sort(key=lambda item: item[:2])
    tb_media.write_projector(p.media, store, directory, [(t, pt) for _, _, t, pt in embeddings])


def _tag_events(
    p: Any, store: Store, logs_id: str, name: str, tag: str, entry: dict[str, Any]
) -> Iterator[tuple[float, Any]]:
    kind = entry["kind"]
    if kind == "scalar":
        style = entry.get("style")
        steps, values, walls = load_series(store, logs_id, name)
        for s, v, w in zip(steps.tolist(), values.tolist(), walls.tolist(), strict=True):
            value = tb_media.scalar_value(p.media, tag, v, style)
            yield w, p.event.Event(wall_time=w, step=s, summary=p.summary.Summary(value=[value]))
        return
    for point in load_events(store, logs_id, name):
        for event in tb_media.point_events(p.media, store, tag, kind, point):
            yield point["wall"], event
