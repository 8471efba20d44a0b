"""``SummaryWriter``'s methods for graphs, embeddings, PR curves, audio, video, meshes and more.

:class:`MediaMethods` is a base of :class:`.writer.SummaryWriter`. Each
method checks and converts its input as ``torch.utils.tensorboard`` does
(:mod:`.media_encode`, :mod:`.convert`) and raises what it raises on input it
refuses; what it computes is then stored: payloads as content-addressed
blobs (an audio clip logged twice is stored once), the rest as one journal
event (:mod:`.event_kinds`). A failure to store (a full disk, a finished
evaluation) never breaks the caller: the point is dropped with one
:class:`MemostoreWarning`.

Methods that need a package torch's writer needs too say so the same way:
``add_graph`` and ``add_onnx_graph`` trace with torch's own code (which
needs ``tensorboard``), ``add_onnx_graph`` raises torch's ImportError
without ``onnx``, ``add_video`` records nothing without moviepy's
``editor`` (torch's writer records an empty value), ``add_image_with_boxes``
draws with Pillow.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import install_hint
from ..records import context, standalone
from . import convert, inputs, media_encode
from .event_kinds import CUSTOM_SCALARS_TAG, GRAPH_TAG, SCALAR_STYLE
from .writer_base import checked_step, wall_time, warn_once

if TYPE_CHECKING:
    from .journal import Journal

# Journal -> the (tag, style) pairs already journaled there: one event per pair.
_styles: weakref.WeakKeyDictionary[Journal, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def _parameter_shapes(model: Any) -> list[list[Any]] | None:
    """``[[dotted name, shape, dtype, "parameter" | "buffer"], ...]`` of *model*, or None.

    The traced ``GraphDef`` names each parameter read but not its shape; the
    dashboard's module tree shows both. Kept beside the graph, never inside it,
    so the exported graph stays the one torch's writer writes.
    """
    try:
        return [
            [name, [int(n) for n in value.shape], str(value.dtype).replace("torch.", ""), role]
            for role, items in (
                ("parameter", model.named_parameters()),
                ("buffer", model.named_buffers()),
            )
            for name, value in items
        ]
    except Exception:  # not a module as torch's tracer takes it: the graph alone is stored
        return None


class MediaMethods:
    """The ``add_*`` methods of ``SummaryWriter`` beyond scalars, histograms, images and text.

    Relies on the writer's ``_journal()`` (the journal of the evaluation
    running now) and ``_failed(method, exc)`` (warn once, drop the point).
    """

    def _journal(self) -> Journal:  # pragma: no cover - provided by SummaryWriter
        raise NotImplementedError

    def _failed(self, method: str, exc: Exception) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- storing ---------------------------------------------------------------------------
    def _keep(
        self,
        method: str,
        event: dict[str, Any],
        step: Any,
        walltime: Any,
        blobs: Mapping[str, bytes | None] | None = None,
        parts: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """Store *blobs* (field -> bytes, their ids become the fields) and journal *event*.

        *parts* are a mesh's ``(content type, array)`` pairs, stored as
        ``event["parts"] = [[content type, blob id, shape], ...]``.
        """
        try:
            journal = self._journal()
            if blobs or parts:
                objects = self._objects()
                for name, data in (blobs or {}).items():
                    event[name] = None if data is None else objects.add_bytes(data)
                if parts:
                    event["parts"] = [
                        [name, objects.add_bytes(array.tobytes()), list(array.shape)]
                        for name, array in parts
                    ]
            event["step"] = checked_step(step)
            event["wall"] = wall_time(walltime)
            journal.add_event(event)
        except Exception as exc:
            self._failed(method, exc)

    def _objects(self) -> Any:
        # After _journal(): outside a memoised call that is what starts the run.
        ctx = context.current() or standalone.current_or_run()
        return ctx.store.objects

    def _scalar_style(self, tag: str, double_precision: bool) -> None:
        """Record that *tag* is exported in TensorBoard's tensor form (``new_style=True``)."""
        try:
            journal = self._journal()
            style = "double" if double_precision else "float"
            seen = _styles.setdefault(journal, set())
            if (tag, style) not in seen:
                seen.add((tag, style))
                journal.add_event(
                    {"kind": SCALAR_STYLE, "tag": tag, "style": style, "step": 0, "wall": 0.0}
                )
        except Exception as exc:
            self._failed("add_scalar", exc)

    # -- tensors -------------------------------------------------------------------------------
    def add_tensor(
        self, tag: str, tensor: Any, global_step: int | None = None, walltime: float | None = None
    ) -> None:
        """Log a torch tensor whole (TensorBoard's tensor plugin), its values in a blob."""
        dtype, field, shape, values = media_encode.tensor_parts(tag, tensor)
        event = {
            "kind": "tensor",
            "tag": str(tag),
            "dtype": dtype,
            "field": field,
            "shape": shape,
            "layout": values.dtype.str,
        }
        self._keep("add_tensor", event, global_step, walltime, {"blob": values.tobytes()})

    # -- images, audio, video ----------------------------------------------------------------
    def add_image_with_boxes(
        self,
        tag: str,
        img_tensor: Any,
        box_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        rescale: float = 1,
        dataformats: str = "CHW",
        labels: Sequence[str] | str | None = None,
    ) -> None:
        """Log an image with boxes ``[x1, y1, x2, y2]`` drawn in red, labelled if *labels* fit.

        tensorboardX's order ``(..., walltime, dataformats, labels, rescale=)`` works too.
        """
        if isinstance(rescale, str):  # tensorboardX's order: dataformats where torch has rescale
            if dataformats != "CHW":
                labels = dataformats  # the labels, given in tensorboardX's position
            rescale, dataformats = 1, rescale
        if labels is not None:
            if isinstance(labels, str):
                labels = [labels]
            if len(labels) != box_tensor.shape[0]:
                labels = None  # torch's writer draws the boxes unlabelled then
        pixels, (height, width, channels) = convert.boxed_pixels(
            img_tensor, box_tensor, rescale, dataformats, labels
        )
        event = {
            "kind": "image",
            "tag": str(tag),
            "height": height,
            "width": width,
            "channels": channels,
        }
        blobs = {"blob": convert.encode_png(pixels)}
        self._keep("add_image_with_boxes", event, global_step, walltime, blobs)

    def add_audio(
        self,
        tag: str,
        snd_tensor: Any,
        global_step: int | None = None,
        sample_rate: int = 44100,
        walltime: float | None = None,
    ) -> None:
        """Log a mono clip (samples in [-1, 1]) as a 16-bit WAV blob."""
        wav, frames, clipped = media_encode.wav_bytes(snd_tensor, sample_rate)
        if clipped:
            warn_once(("audio", str(tag)), f"audio {tag!r}: amplitude out of range, clipped")
        event = {
            "kind": "audio",
            "tag": str(tag),
            "sample_rate": float(sample_rate),
            "channels": 1,
            "frames": frames,
            "content_type": "audio/wav",
        }
        self._keep("add_audio", event, global_step, walltime, {"blob": wav})

    def add_video(
        self,
        tag: str,
        vid_tensor: Any,
        global_step: int | None = None,
        fps: float = 4,
        walltime: float | None = None,
        dataformats: str = "NTCHW",
    ) -> None:
        """Log ``(N, T, C, H, W)`` videos, tiled into one animated GIF (needs moviepy).

        tensorboardX's ``dataformats`` names the axes of other layouts (``"NTHWC"``).
        """
        if dataformats != "NTCHW":
            vid_tensor = inputs.video_axes(vid_tensor, dataformats)
        frames = media_encode.video_frames(vid_tensor)
        gif, why = media_encode.gif_bytes(frames, fps)
        if gif is None:
            warn_once(("video", why), f"{why}; add_video recorded nothing")
            return
        _, height, width, channels = frames.shape
        event = {
            "kind": "video",
            "tag": str(tag),
            "height": height,
            "width": width,
            "channels": channels,
        }
        self._keep("add_video", event, global_step, walltime, {"blob": gif})

    # -- curves and meshes ---------------------------------------------------------------------
    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """Log a precision-recall curve of binary *labels* against *predictions* in [0, 1]."""
        data, thresholds = media_encode.pr_curve_data(labels, predictions, num_thresholds, weights)
        self._pr_curve("add_pr_curve", tag, data, thresholds, global_step, walltime)

    def add_pr_curve_raw(
        self,
        tag: str,
        true_positive_counts: Any,
        false_positive_counts: Any,
        true_negative_counts: Any,
        false_negative_counts: Any,
        precision: Any,
        recall: Any,
        global_step: int | None = None,
        num_thresholds: int = 127,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """Log a precision-recall curve from counts the caller computed (*weights* unused)."""
        rows = (
            true_positive_counts,
            false_positive_counts,
            true_negative_counts,
            false_negative_counts,
            precision,
            recall,
        )
        data, thresholds = media_encode.pr_curve_raw_data(rows, num_thresholds)
        self._pr_curve("add_pr_curve_raw", tag, data, thresholds, global_step, walltime)

    def _pr_curve(
        self, method: str, tag: str, data: Any, thresholds: int, step: Any, walltime: Any
    ) -> None:
        event = {"kind": "pr_curve", "tag": str(tag), "thresholds": thresholds}
        event["data"] = data.tolist()
        self._keep(method, event, step, walltime)

    def add_mesh(
        self,
        tag: str,
        vertices: Any,
        colors: Any = None,
        faces: Any = None,
        config_dict: Mapping[str, Any] | None = None,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a mesh or point cloud: ``(B, N, 3)`` vertices, optional colors and faces."""
        config, components, parts = media_encode.mesh_parts(vertices, colors, faces, config_dict)
        event = {"kind": "mesh", "tag": str(tag), "config": config, "components": components}
        self._keep("add_mesh", event, global_step, walltime, parts=parts)

    # -- layouts ---------------------------------------------------------------------------------
    def add_custom_scalars(self, layout: Mapping[str, Mapping[str, Sequence[Any]]]) -> None:
        """Log a custom-scalars layout: ``{category: {title: ["Multiline"|"Margin", tags]}}``."""
        rows = media_encode.custom_layout(layout)
        event = {"kind": "custom_scalars", "tag": CUSTOM_SCALARS_TAG, "layout": rows}
        self._keep("add_custom_scalars", event, None, None)

    def add_custom_scalars_multilinechart(
        self, tags: Sequence[str], category: str = "default", title: str = "untitled"
    ) -> None:
        """Log a layout of one multiline chart of *tags*."""
        self.add_custom_scalars({category: {title: ["Multiline", tags]}})

    def add_custom_scalars_marginchart(
        self, tags: Sequence[str], category: str = "default", title: str = "untitled"
    ) -> None:
        """Log a layout of one margin chart: *tags* are the value, lower and upper bound."""
        if len(tags) != 3:
            raise AssertionError(f"Expected 3 tags, got {len(tags)}.")
        self.add_custom_scalars({category: {title: ["Margin", tags]}})

    # -- graphs ------------------------------------------------------------------------------------
    def add_graph(
        self,
        model: Any,
        input_to_model: Any = None,
        verbose: bool = False,
        use_strict_trace: bool = True,
    ) -> None:
        """Log the graph of *model* traced on *input_to_model*, by torch's own tracer.

        Raises what the trace raises (a wrong input size is a RuntimeError).
        """
        try:
            from torch.utils.tensorboard._pytorch_graph import graph
        except ImportError as exc:
            self._needs_tensorboard("add_graph", exc)
            return
        graph_def, step_stats = graph(model, input_to_model, verbose, use_strict_trace)
        blobs = {
            "blob": graph_def.SerializeToString(),
            "run_metadata": step_stats.SerializeToString(),
        }
        event = {"kind": "graph", "tag": GRAPH_TAG, "parameters": _parameter_shapes(model)}
        self._keep("add_graph", event, None, None, blobs)

    def add_onnx_graph(self, prototxt: Any = None, *, onnx_model_file: Any = None) -> None:
        """Log the graph of an ONNX model file, converted by torch's own code (needs onnx).

        ``onnx_model_file`` is tensorboardX's name for *prototxt*.
        """
        if prototxt is None:
            prototxt = onnx_model_file
        try:
            from torch.utils.tensorboard._onnx_graph import load_onnx_graph
        except ImportError as exc:
            self._needs_tensorboard("add_onnx_graph", exc)
            return
        graph_def = load_onnx_graph(prototxt)  # ImportError without onnx, as torch's writer
        blobs = {"blob": graph_def.SerializeToString(), "run_metadata": None}
        self._keep("add_onnx_graph", {"kind": "graph", "tag": GRAPH_TAG}, None, None, blobs)

    def _needs_tensorboard(self, method: str, exc: ImportError) -> None:
        warn_once(
            ("needs tensorboard", method),
            f"{method} converts graphs with torch.utils.tensorboard, which needs the "
            f"tensorboard package ({install_hint('tensorboard')}): {exc}; "
            "the graph is not recorded",
        )

    # -- embeddings --------------------------------------------------------------------------------
    def add_embedding(
        self,
        mat: Any,
        metadata: Sequence[Any] | None = None,
        label_img: Any = None,
        global_step: int | None = None,
        tag: str = "default",
        metadata_header: Sequence[str] | None = None,
    ) -> None:
        """Log points for the projector: an ``(N, D)`` matrix, labels and ``(N, C, H, W)`` images.

        The matrix, the labels' TSV and the sprite are blobs; ``memostore
        export tensorboard`` writes them where torch's writer writes them
        (``<step>/<tag>/`` and ``projector_config.pbtxt`` in the run).
        """
        matrix, tsv, sprite, dim = media_encode.embedding_parts(
            mat, metadata, label_img, metadata_header
        )
        event = {
            "kind": "embedding",
            "tag": str(tag),
            "layout": matrix.dtype.str,
            "shape": list(matrix.shape),
            "sprite_dim": dim,
        }
        blobs = {
            "blob": matrix.tobytes(),
            "metadata": tsv,
            "sprite": None if sprite is None else convert.encode_png(sprite),
        }
        self._keep("add_embedding", event, global_step, None, blobs)
