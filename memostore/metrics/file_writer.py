"""``SummaryWriter.file_writer``: TensorBoard's ``FileWriter`` interface over one run.

Libraries reach past ``SummaryWriter`` into its file writer: PyTorch
Lightning's ``TensorBoardLogger`` writes its hyper-parameters with
``writer._get_file_writer().add_summary(...)``, torch's own ``add_hparams``
does the same. :class:`FileWriter` takes those protocol buffers (torch's,
tensorboard's or tensorboardX's: they are read by field) and stores what they
hold in the run it belongs to: scalars, histograms, images, videos, audio,
text and hyper-parameter sessions. Other plugins' summaries are skipped with
one warning.

When the writer also writes event files (``event_files=True``), each call
is passed to the real file writer first, so the event file is exactly the
original library's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .event_kinds import GRAPH_TAG

if TYPE_CHECKING:
    from .runs import Run


class RunSink(Protocol):
    """Where a file writer puts what it reads: its ``SummaryWriter``'s points (writer_base)."""

    def keep_in(
        self,
        run: Run,
        method: str,
        event: dict[str, Any],
        step: Any,
        walltime: Any,
        blobs: Mapping[str, bytes | None],
    ) -> None: ...

    def put_scalar(self, run: Run, tag: str, value: float, step: int, wall: float) -> None: ...

    def put_event(self, run: Run, event: dict[str, Any], step: int, wall: float) -> None: ...

    def put_session(
        self,
        run: Run,
        hparams: Mapping[str, Any],
        metrics: list[str],
        domains: Mapping[str, list[Any]],
        step: int,
        wall: float,
    ) -> None: ...

    def resolve_step(self, step: Any) -> int: ...

    def resolve_wall(self, walltime: Any) -> float: ...

    def flush_journal(self) -> None: ...

    def failed(self, method: str, exc: Exception) -> None: ...

    def unsupported(self, name: str) -> None: ...

    def use_metadata(
        self, *, global_step: int | None = None, walltime: float | None = None
    ) -> contextlib.AbstractContextManager[Any]: ...


_PNG = b"\x89PNG\r\n\x1a\n"
_GIF = (b"GIF87a", b"GIF89a")


class FileWriter:
    """One run's file writer: ``add_summary``, ``add_event``, ``flush``, ``close``, ...

    Args:
        writer: where its points go: the memostore writer it belongs to.
        run: the run its points go to.
        log_dir: the directory as the writer names it (``get_logdir``).
        tee: the original library's file writer, when event files are written.
    """

    def __init__(self, writer: RunSink, run: Run, log_dir: str, tee: Any = None) -> None:
        self._writer = writer
        self._run = run
        self._log_dir = log_dir
        self._tee = tee
        # The Experiment summary comes before SessionStartInfo (torch, Lightning):
        # its metric names and domains wait here for the session they describe.
        self._experiment: tuple[list[str], dict[str, list[Any]]] | None = None

    @property
    def event_writer(self) -> Any:
        """The original library's event file writer, or None when no event files are written."""
        return None if self._tee is None else self._tee.event_writer

    def get_logdir(self) -> str:
        """The run's directory."""
        return self._log_dir

    def add_summary(
        self, summary: Any, global_step: int | None = None, walltime: float | None = None
    ) -> None:
        """Store the values of a ``Summary`` protocol buffer at *global_step*."""
        if self._tee is not None:
            self._tee.add_summary(summary, global_step, walltime)
        self._store(summary, global_step, walltime)

    def add_event(self, event: Any, step: int | None = None, walltime: float | None = None) -> None:
        """Store the summary an ``Event`` holds (file versions, session logs: nothing)."""
        if self._tee is not None:
            self._tee.add_event(event, step, walltime)
        if event.HasField("summary"):
            step = event.step if step is None else step
            walltime = (event.wall_time or None) if walltime is None else walltime
            self._store(event.summary, step, walltime)

    def add_graph(self, graph_profile: Any, walltime: float | None = None) -> None:
        """Store a ``GraphDef``, or the ``(GraphDef, RunMetadata)`` pair torch's tracer makes."""
        if self._tee is not None:
            self._tee.add_graph(graph_profile, walltime)
        graph, metadata = (
            graph_profile if isinstance(graph_profile, tuple) else (graph_profile, None)
        )
        blobs = {
            "blob": graph.SerializeToString(),
            "run_metadata": None if metadata is None else metadata.SerializeToString(),
        }
        event = {"kind": "graph", "tag": GRAPH_TAG}
        self._writer.keep_in(self._run, "add_graph", event, None, walltime, blobs)

    def add_onnx_graph(self, graph: Any, walltime: float | None = None) -> None:
        """Store an ONNX model's graph, as ``add_graph`` stores a traced one."""
        if self._tee is not None:
            self._tee.add_onnx_graph(graph, walltime)
        blobs = {"blob": graph.SerializeToString(), "run_metadata": None}
        event = {"kind": "graph", "tag": GRAPH_TAG}
        self._writer.keep_in(self._run, "add_onnx_graph", event, None, walltime, blobs)

    def flush(self) -> None:
        """Flush the run's points to the journal (and the event file, if any)."""
        if self._tee is not None:
            self._tee.flush()
        self._writer.flush_journal()

    def close(self) -> None:
        """Flush; the event file, if any, is closed."""
        if self._tee is not None:
            self._tee.close()
        self._writer.flush_journal()

    def reopen(self) -> None:
        """Reopen the event file after :meth:`close` (nothing to do for the store)."""
        if self._tee is not None:
            self._tee.reopen()

    @contextlib.contextmanager
    def use_metadata(
        self, *, global_step: int | None = None, walltime: float | None = None
    ) -> Iterator[FileWriter]:
        """tensorboardX's defaults for the step and wall time of the points logged inside."""
        with self._writer.use_metadata(global_step=global_step, walltime=walltime):
            yield self

    # -- reading summaries -------------------------------------------------------------------
    def _store(self, summary: Any, step: int | None, walltime: float | None) -> None:
        writer = self._writer
        step_value = writer.resolve_step(step)
        wall = writer.resolve_wall(walltime)
        for value in summary.value:
            try:
                self._store_value(value, step_value, wall)
            except Exception as exc:
                writer.failed("file_writer.add_summary", exc)

    def _store_value(self, value: Any, step: int, wall: float) -> None:
        writer, run, tag = self._writer, self._run, value.tag
        which = value.WhichOneof("value")
        plugin = value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""
        if which == "simple_value":
            writer.put_scalar(run, tag, float(value.simple_value), step, wall)
        elif which == "histo":
            h = value.histo
            event = {
                "kind": "histogram",
                "tag": tag,
                "min": h.min,
                "max": h.max,
                "num": h.num,
                "sum": h.sum,
                "sum_squares": h.sum_squares,
                "limits": list(h.bucket_limit),
                "counts": list(h.bucket),
            }
            writer.put_event(run, event, step, wall)
        elif which == "image":
            self._store_image(value.image, tag, step, wall)
        elif which == "audio":
            a = value.audio
            event = {
                "kind": "audio",
                "tag": tag,
                "sample_rate": float(a.sample_rate),
                "channels": int(a.num_channels),
                "frames": int(a.length_frames),
                "content_type": a.content_type,
            }
            writer.keep_in(run, "add_audio", event, step, wall, {"blob": a.encoded_audio_string})
        elif plugin == "hparams":
            self._store_hparams(value.metadata.plugin_data.content, step, wall)
        elif plugin == "scalars" and which == "tensor":
            t = value.tensor
            number = (list(t.double_val) or list(t.float_val) or [float("nan")])[0]
            writer.put_scalar(run, tag, float(number), step, wall)
        elif plugin == "text" and which == "tensor":
            text = b"".join(value.tensor.string_val[:1]).decode("utf-8", "replace")
            writer.put_event(run, {"kind": "text", "tag": tag, "text": text}, step, wall)
        else:
            writer.unsupported(f"file_writer.add_summary of {plugin or which} summaries")

    def _store_image(self, image: Any, tag: str, step: int, wall: float) -> None:
        data = image.encoded_image_string
        kind = "image" if data.startswith(_PNG) else "video" if data.startswith(_GIF) else None
        if kind is None:
            self._writer.unsupported("file_writer.add_summary of images other than PNG and GIF")
            return
        event = {
            "kind": kind,
            "tag": tag,
            "height": int(image.height),
            "width": int(image.width),
            "channels": int(image.colorspace),
        }
        self._writer.keep_in(self._run, "add_summary", event, step, wall, {"blob": data})

    def _store_hparams(self, content: bytes, step: int, wall: float) -> None:
        data = _hparams_plugin_data().FromString(content)
        which = data.WhichOneof("data")
        if which == "experiment":
            domains = {
                info.name: [_struct_value(v) for v in info.domain_discrete.values]
                for info in data.experiment.hparam_infos
                if info.HasField("domain_discrete")
            }
            metrics = [m.name.tag for m in data.experiment.metric_infos]
            self._experiment = (metrics, domains)
        elif which == "session_start_info":
            metrics, domains = self._experiment or ([], {})
            self._experiment = None
            hparams = {k: _struct_value(v) for k, v in data.session_start_info.hparams.items()}
            self._writer.put_session(self._run, hparams, metrics, domains, step, wall)
        # session_end_info: the evaluation's own status says how the session ended.


def _struct_value(value: Any) -> Any:
    which = value.WhichOneof("kind")
    if which == "number_value":
        return value.number_value
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    return None


def _hparams_plugin_data() -> Any:
    try:
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    except ImportError:
        from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    return HParamsPluginData


__all__ = ["FileWriter"]
