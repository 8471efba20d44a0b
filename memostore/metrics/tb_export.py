"""Writing evaluations' logs as TensorBoard event files.

Each evaluation becomes one run directory, ``<logdir>/<function>-<id prefix>``,
holding one event file with its scalars (as float32 ``simple_value``, as
TensorBoard stores them), histograms, images, text and hyper-parameters: all
in the same run, so TensorBoard's HParams view links them.

Needs the ``tensorboard`` package (``pip install 'memostore[tensorboard]'``);
nothing else in memostore does.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .read import load_events, load_manifest, load_series, logged_hparams

if TYPE_CHECKING:
    from ..store import Store

INSTALL_HINT = "pip install 'memostore[tensorboard]'"
_FILE_SUFFIX = ".memostore"
_STATUS = {"ok": "STATUS_SUCCESS", "error": "STATUS_FAILURE", "interrupted": "STATUS_ABORTED"}


def _protos() -> SimpleNamespace:
    """TensorBoard's protobuf modules, or the error that says how to install them."""
    try:
        from google.protobuf import struct_pb2
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
        from tensorboard.plugins.hparams import metadata as hp_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter
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
    from ..evaluation import Evaluation

    out: list[Path] = []
    for evaluation_id in evaluation_ids:
        evaluation = Evaluation.load(store, evaluation_id)
        if not evaluation.logs_id:
            raise MemostoreError(
                f"evaluation {evaluation_id[:12]} ({evaluation.function}) logged no metrics"
            )
        run_dir = Path(logdir) / run_name(evaluation.function, evaluation_id)
        _write_run(p, store, evaluation, run_dir)
        out.append(run_dir)
    return out


def _write_run(p: SimpleNamespace, store: Store, evaluation: Any, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob(f"events.out.tfevents.*{_FILE_SUFFIX}"):
        old.unlink()  # a re-export replaces its own earlier file, never the user's
    name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
    path = run_dir / (name + _FILE_SUFFIX)
    started = float(evaluation.created or time.time())
    with open(path, "wb") as f:
        writer = p.RecordWriter(f)
        writer.write(
            p.event.Event(wall_time=started, file_version="brain.Event:2").SerializeToString()
        )
        for event in _hparams_events(p, store, evaluation, started):
            writer.write(event.SerializeToString())
        tags = load_manifest(store, evaluation.logs_id).get("tags", {})
        for tag, entry in tags.items():
            for event in _tag_events(p, store, evaluation.logs_id, tag, entry["kind"]):
                writer.write(event.SerializeToString())
        writer.flush()


def _tag_events(p: Any, store: Store, logs_id: str, tag: str, kind: str) -> Any:
    Summary, Event = p.summary.Summary, p.event.Event
    if kind == "scalar":
        steps, values, walls = load_series(store, logs_id, tag)
        for s, v, w in zip(steps.tolist(), values.tolist(), walls.tolist(), strict=True):
            value = Summary.Value(tag=tag, simple_value=v)
            yield Event(wall_time=w, step=s, summary=Summary(value=[value]))
        return
    for point in load_events(store, logs_id, tag):
        if kind == "histogram":
            histo = p.summary.HistogramProto(
                min=point["min"],
                max=point["max"],
                num=point["num"],
                sum=point["sum"],
                sum_squares=point["sum_squares"],
                bucket_limit=point["limits"],
                bucket=point["counts"],
            )
            value = Summary.Value(tag=tag, histo=histo)
        elif kind == "image":
            image = Summary.Image(
                height=point["height"],
                width=point["width"],
                colorspace=point["channels"],
                encoded_image_string=store.objects.get_bytes(point["blob"]),
            )
            value = Summary.Value(tag=tag, image=image)
        elif kind == "text":
            value = Summary.Value(
                tag=tag,
                metadata=p.summary.SummaryMetadata(
                    plugin_data=p.summary.SummaryMetadata.PluginData(plugin_name="text")
                ),
                tensor=p.tensor.TensorProto(
                    dtype=7,  # DT_STRING
                    string_val=[point["text"].encode("utf-8")],
                    tensor_shape=p.shape.TensorShapeProto(
                        dim=[p.shape.TensorShapeProto.Dim(size=1)]
                    ),
                ),
            )
        else:
            continue
        yield Event(wall_time=point["wall"], step=point["step"], summary=Summary(value=[value]))


def _hp_value(p: Any, value: Any) -> Any:
    if isinstance(value, bool):
        return p.struct.Value(bool_value=value)
    if isinstance(value, (int, float)):
        return p.struct.Value(number_value=float(value))
    return p.struct.Value(string_value=str(value))


def _hparams_events(p: Any, store: Store, evaluation: Any, started: float) -> list[Any]:
    logged = logged_hparams(store, evaluation.logs_id)
    hparams = {**logged["hparams"], **evaluation.hparams}
    if not hparams:
        return []
    metrics = logged["metrics"] or [
        tag
        for tag, entry in load_manifest(store, evaluation.logs_id).get("tags", {}).items()
        if entry["kind"] == "scalar"
    ]
    api, plugin_data, meta = p.api, p.plugin_data, p.hp_metadata
    infos = []
    for name, value in sorted(hparams.items()):
        info = api.HParamInfo(name=name)
        if isinstance(value, bool):
            info.type = api.DATA_TYPE_BOOL
        elif isinstance(value, (int, float)):
            info.type = api.DATA_TYPE_FLOAT64
        else:
            info.type = api.DATA_TYPE_STRING
        domain = logged["domains"].get(name)
        if domain:
            info.domain_discrete.extend(_hp_value(p, x) for x in domain)
        infos.append(info)
    experiment = api.Experiment(
        hparam_infos=infos,
        metric_infos=[api.MetricInfo(name=api.MetricName(tag=m)) for m in metrics],
    )
    start = plugin_data.SessionStartInfo(start_time_secs=started)
    for name, value in hparams.items():
        start.hparams[name].CopyFrom(_hp_value(p, value))
    end = plugin_data.SessionEndInfo(
        status=getattr(api, _STATUS.get(evaluation.status, "STATUS_UNKNOWN")),
        end_time_secs=started + float(evaluation.duration_s or 0.0),
    )
    events = []
    for tag, data in (
        (meta.EXPERIMENT_TAG, plugin_data.HParamsPluginData(experiment=experiment)),
        (meta.SESSION_START_INFO_TAG, plugin_data.HParamsPluginData(session_start_info=start)),
        (meta.SESSION_END_INFO_TAG, plugin_data.HParamsPluginData(session_end_info=end)),
    ):
        value = p.summary.Summary.Value(
            tag=tag, metadata=meta.create_summary_metadata(data), tensor=meta.NULL_TENSOR
        )
        events.append(
            p.event.Event(wall_time=started, step=0, summary=p.summary.Summary(value=[value]))
        )
    return events
