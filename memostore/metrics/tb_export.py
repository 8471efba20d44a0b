"""Writing evaluations' logs as TensorBoard event files.

Each evaluation becomes one run directory, ``<logdir>/<function>-<id prefix>``,
holding one event file with every point it logged, written as
``torch.utils.tensorboard``'s writer writes it (:mod:`.tb_media`): scalars
as float32 ``simple_value`` (tensors when logged ``new_style``), histograms,
images, text, audio, videos, PR curves, meshes, tensors, custom-scalar
layouts and graphs, and the hyper-parameters, all in the same run so that
TensorBoard's HParams view links them. Embeddings are written beside it, as
the projector's files. Events are in wall-time order across tags, each tag's
in logged order.

Needs the ``tensorboard`` package (``pip install 'memostore[tensorboard]'``);
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

from ..errors import MemostoreError
from . import tb_hparams, tb_media
from .read import load_events, load_manifest, load_series
from .runs import export_plan

if TYPE_CHECKING:
    from ..odb.store import Store

INSTALL_HINT = "pip install 'memostore[tensorboard]'"
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


def run_name(function: str, evaluation_id: str) -> str:
    """The run directory name of an evaluation: ``<short function>-<12 hex digits>``."""
    short = function.split(":", 1)[-1] if ":" in function else function
    short = re.sub(r"[^A-Za-z0-9._-]+", "_", short).strip("._") or "evaluation"
    return f"{short}-{evaluation_id[:12]}"


def export_tensorboard(
    store: Store, evaluation_ids: Sequence[str], logdir: str | Path
) -> list[Path]:
    """Write one TensorBoard run per evaluation under *logdir*; the run directories.

    Raises:
        MemostoreError: tensorboard is not installed, or an evaluation has no logs.
    """
    p = _protos()
    from ..records.evaluation import Evaluation

    out: list[Path] = []
    for evaluation_id in evaluation_ids:
        evaluation = Evaluation.load(store, evaluation_id)
        if not evaluation.logs_id:
            raise MemostoreError(
                f"evaluation {evaluation_id[:12]} ({evaluation.function}) logged no metrics"
            )
        run_dir = Path(logdir) / run_name(evaluation.function, evaluation_id)
        _write_runs(p, store, evaluation, run_dir)
        out.append(run_dir)
    return out


def _write_runs(p: SimpleNamespace, store: Store, evaluation: Any, run_dir: Path) -> None:
    """One directory per run of the evaluation, laid out as TensorBoard's writer did."""
    body = load_manifest(store, evaluation.logs_id)
    started = float(evaluation.created or time.time())
    for sub, names, sessions in export_plan(body):
        first: list[tuple[float, Any]] = []
        if not sub:
            # The evaluation itself is a session of its main run: its call's
            # scalar arguments and add_hparams values, linked to its metrics.
            first = tb_hparams.evaluation_events(p, store, evaluation, started, names)
        # Each add_hparams call is a session of its own run, as torch writes it.
        for session in sessions:
            first.extend(tb_hparams.session_events(p, session))
        where = run_dir / sub if sub else run_dir
        _write_one(p, store, evaluation.logs_id, body.get("tags", {}), where, names, first, started)


def _write_one(
    p: SimpleNamespace,
    store: Store,
    logs_id: str,
    entries: dict[str, Any],
    directory: Path,
    names: dict[str, str],
    first: list[tuple[float, Any]],
    started: float,
) -> None:
    """Write one run: the points of *names* (name -> the tag shown), after *first*."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"events.out.tfevents.*{_FILE_SUFFIX}"):
        old.unlink()  # a re-export replaces its own earlier file, never the user's
    file_name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
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
