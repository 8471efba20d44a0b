"""TensorBoard protocol buffers of stored points, as torch's writer writes them.

:func:`point_events` turns one stored point of any kind into the events
torch's ``SummaryWriter`` writes for the call that logged it (same tags,
plugin metadata, dtypes and shapes); :func:`write_projector` writes the
embedding files and ``projector_config.pbtxt`` into a run directory as
torch's ``add_embedding`` does. Imported only by :mod:`.tb_export`, once
tensorboard is known to be there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..odb.inside import join_beneath
from . import media_encode
from .event_kinds import CUSTOM_SCALARS_TAG

if TYPE_CHECKING:
    from ..odb.store import Store

DT_STRING = 7  # TensorProto's string dtype
RUN_METADATA_TAG = "step1"  # the tag torch's add_graph gives the trace's step stats


def protos() -> SimpleNamespace:
    """The plugin protocol buffer modules the media kinds need (tensorboard required)."""
    from google.protobuf import text_format
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.mesh import metadata as mesh_metadata
    from tensorboard.plugins.pr_curve import plugin_data_pb2 as pr_data
    from tensorboard.plugins.projector import projector_config_pb2
    from tensorboard.plugins.text import plugin_data_pb2 as text_data

    return SimpleNamespace(
        event=event_pb2,
        summary=summary_pb2,
        tensor=tensor_pb2,
        shape=tensor_shape_pb2,
        layout=layout_pb2,
        mesh=mesh_metadata,
        pr=pr_data,
        projector=projector_config_pb2,
        text=text_data,
        text_format=text_format,
    )


def _shape(m: SimpleNamespace, dims: Any) -> Any:
    return m.shape.TensorShapeProto(dim=[m.shape.TensorShapeProto.Dim(size=int(d)) for d in dims])


def _plugin(m: SimpleNamespace, name: str, content: bytes = b"") -> Any:
    data = m.summary.SummaryMetadata.PluginData(plugin_name=name, content=content)
    return m.summary.SummaryMetadata(plugin_data=data)


def scalar_value(m: SimpleNamespace, tag: str, value: float, style: str | None) -> Any:
    """A scalar as ``add_scalar`` writes it: ``simple_value``, or a tensor when new-style."""
    Value = m.summary.Summary.Value
    if style is None:
        return Value(tag=tag, simple_value=value)
    if style == "double":
        tensor = m.tensor.TensorProto(double_val=[value], dtype="DT_DOUBLE")
    else:
        tensor = m.tensor.TensorProto(float_val=[value], dtype="DT_FLOAT")
    return Value(tag=tag, tensor=tensor, metadata=_plugin(m, "scalars"))


def point_events(
    m: SimpleNamespace, store: Store, tag: str, kind: str, point: dict[str, Any]
) -> Iterator[Any]:
    """The events of one stored point (none for embeddings: they are files)."""
    Event, Summary = m.event.Event, m.summary.Summary
    wall, step = point["wall"], point["step"]
    if kind == "graph":
        yield Event(wall_time=wall, graph_def=store.objects.get_bytes(point["blob"]))
        if point.get("run_metadata"):
            tagged = m.event.TaggedRunMetadata(
                tag=RUN_METADATA_TAG, run_metadata=store.objects.get_bytes(point["run_metadata"])
            )
            yield Event(wall_time=wall, tagged_run_metadata=tagged)
        return
    values = _values(m, store, tag, kind, point)
    if values:
        yield Event(wall_time=wall, step=step, summary=Summary(value=values))


def _values(
    m: SimpleNamespace, store: Store, tag: str, kind: str, point: dict[str, Any]
) -> list[Any]:
    Value, Summary = m.summary.Summary.Value, m.summary.Summary
    if kind == "text":
        content = m.text.TextPluginData(version=0).SerializeToString()
        tensor = m.tensor.TensorProto(
            dtype=DT_STRING, string_val=[point["text"].encode("utf-8")], tensor_shape=_shape(m, [1])
        )
        return [
            Value(tag=f"{tag}/text_summary", metadata=_plugin(m, "text", content), tensor=tensor)
        ]
    if kind == "histogram":
        histo = m.summary.HistogramProto(
            min=point["min"],
            max=point["max"],
            num=point["num"],
            sum=point["sum"],
            sum_squares=point["sum_squares"],
            bucket_limit=point["limits"],
            bucket=point["counts"],
        )
        return [Value(tag=tag, histo=histo)]
    if kind in ("image", "video"):
        image = Summary.Image(
            height=point["height"],
            width=point["width"],
            colorspace=point["channels"],
            encoded_image_string=store.objects.get_bytes(point["blob"]),
        )
        return [Value(tag=tag, image=image)]
    if kind == "audio":
        audio = Summary.Audio(
            sample_rate=point["sample_rate"],
            num_channels=point["channels"],
            length_frames=point["frames"],
            encoded_audio_string=store.objects.get_bytes(point["blob"]),
            content_type=point["content_type"],
        )
        return [Value(tag=tag, audio=audio)]
    if kind == "pr_curve":
        data = point["data"]
        content = m.pr.PrCurvePluginData(version=0, num_thresholds=point["thresholds"])
        tensor = m.tensor.TensorProto(
            dtype="DT_FLOAT",
            float_val=data.reshape(-1).tolist(),
            tensor_shape=_shape(m, data.shape),
        )
        metadata = _plugin(m, "pr_curves", content.SerializeToString())
        return [Value(tag=tag, metadata=metadata, tensor=tensor)]
    if kind == "mesh":
        return [_mesh_value(m, store, tag, point, part) for part in point["parts"]]
    if kind == "tensor":
        values = np.frombuffer(store.objects.get_bytes(point["blob"]), dtype=point["layout"])
        tensor = m.tensor.TensorProto(
            dtype=point["dtype"],
            tensor_shape=_shape(m, point["shape"]),
            **{point["field"]: values.tolist()},
        )
        return [Value(tag=tag, metadata=_plugin(m, "tensor"), tensor=tensor)]
    if kind == "custom_scalars":
        layout = custom_layout_proto(m, point["layout"])
        tensor = m.tensor.TensorProto(
            dtype="DT_STRING",
            string_val=[layout.SerializeToString()],
            tensor_shape=m.shape.TensorShapeProto(),
        )
        return [Value(tag=CUSTOM_SCALARS_TAG, tensor=tensor, metadata=_plugin(m, "custom_scalars"))]
    return []  # embeddings are files; a kind from a newer memostore is skipped


def _mesh_value(
    m: SimpleNamespace, store: Store, tag: str, point: dict[str, Any], part: list[Any]
) -> Any:
    name, blob, shape = part
    content_type = media_encode.MESH_CONTENT[name]
    metadata = m.mesh.create_summary_metadata(
        tag, None, content_type, point["components"], shape, None, json_config=point["config"]
    )
    values = np.frombuffer(store.objects.get_bytes(blob), dtype="<f4")
    tensor = m.tensor.TensorProto(
        dtype="DT_FLOAT", float_val=values.tolist(), tensor_shape=_shape(m, shape)
    )
    return m.summary.Summary.Value(
        tag=m.mesh.get_instance_name(tag, content_type), tensor=tensor, metadata=metadata
    )


def custom_layout_proto(m: SimpleNamespace, rows: list[list[Any]]) -> Any:
    """The ``Layout`` proto of a stored custom-scalars layout."""
    L = m.layout
    categories = []
    for category, charts in rows:
        protos = []
        for title, kind, tags in charts:
            if kind == "Margin":
                series = L.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])
                protos.append(L.Chart(title=title, margin=L.MarginChartContent(series=[series])))
            else:
                protos.append(L.Chart(title=title, multiline=L.MultilineChartContent(tag=tags)))
        categories.append(L.Category(title=category, chart=protos))
    return L.Layout(category=categories)


def write_projector(
    m: SimpleNamespace, store: Store, run_dir: Path, embeddings: list[tuple[str, dict[str, Any]]]
) -> None:
    """Write each ``(tag, point)`` embedding's files and the run's projector config.

    As torch's ``add_embedding``: ``<step>/<tag>/tensors.tsv``,
    ``metadata.tsv`` and ``sprite.png``, and ``projector_config.pbtxt``
    listing the embeddings in the order they were logged.
    """
    config = m.projector.ProjectorConfig()
    for tag, point in embeddings:
        subdir = media_encode.embedding_subdir(point["step"], tag)
        folder = join_beneath(run_dir, subdir)  # the tag is a stored name
        folder.mkdir(parents=True, exist_ok=True)
        matrix = np.frombuffer(store.objects.get_bytes(point["blob"]), dtype=point["layout"])
        matrix = matrix.reshape(point["shape"])
        (folder / "tensors.tsv").write_bytes(media_encode.tensors_tsv(matrix))
        info = config.embeddings.add()
        info.tensor_name = f"{tag}:{str(point['step']).zfill(5)}"
        info.tensor_path = f"{subdir}/tensors.tsv"
        if point.get("metadata"):
            (folder / "metadata.tsv").write_bytes(store.objects.get_bytes(point["metadata"]))
            info.metadata_path = f"{subdir}/metadata.tsv"
        if point.get("sprite"):
            (folder / "sprite.png").write_bytes(store.objects.get_bytes(point["sprite"]))
            info.sprite.image_path = f"{subdir}/sprite.png"
            info.sprite.single_image_dim.extend(point["sprite_dim"])
    if embeddings:
        text = m.text_format.MessageToString(config)
        (run_dir / "projector_config.pbtxt").write_bytes(text.encode("utf-8"))
