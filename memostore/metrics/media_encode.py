"""Turning audio, video, PR curves, meshes, tensors and layouts into storable parts.

Each function computes what ``torch.utils.tensorboard`` computes for the same
call (the same arithmetic, in the same order, so the exported numbers are
equal) and raises what it raises on input it refuses. Nothing here imports
torch or tensorboard at module level or performs I/O: the results are arrays,
bytes and JSON-able lists that :mod:`.media` stores and :mod:`.tb_media`
turns into protocol buffers.
"""

from __future__ import annotations

import io
import json
import math
import wave
from typing import Any

import numpy as np

from .convert import is_torch_tensor, make_array, tile_grid, to_numpy

# TensorBoard's mesh plugin content types (MeshPluginData.ContentType).
MESH_CONTENT = {"VERTEX": 1, "FACE": 2, "COLOR": 3}
PR_MAX_THRESHOLDS = 127
_PR_MIN_COUNT = 1e-07


# -- audio ------------------------------------------------------------------------------------
def wav_bytes(snd: Any, sample_rate: float) -> tuple[bytes, int, bool]:
    """``(WAV file bytes, frames, clipped)`` of a mono clip with samples in [-1, 1].

    16-bit PCM, the samples scaled by 32767 and truncated, as torch's writer
    encodes them; out-of-range samples are clipped (``clipped`` says so).

    Raises:
        AssertionError: the clip is not one-dimensional once squeezed.
    """
    array = make_array(snd).squeeze()
    clipped = bool(abs(array).max() > 1)
    if clipped:
        array = array.clip(-1, 1)
    if array.ndim != 1:
        raise AssertionError("input tensor should be 1 dimensional.")
    pcm = (array * np.iinfo(np.int16).max).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.data)
    return out.getvalue(), int(pcm.shape[-1]), clipped


# -- video ------------------------------------------------------------------------------------
def video_frames(vid: Any) -> np.ndarray:
    """``(T, H, W, C)`` uint8 frames of an ``(N, T, C, H, W)`` batch of videos.

    The N videos are tiled into one, as torch's writer does: N is padded with
    blank videos to a power of two, laid out in ``2 ** ((N.bit_length() - 1) // 2)``
    rows; uint8 input is taken as [0, 255], anything else as [0, 1].
    """
    array = make_array(vid)
    batch, frames, channels, height, width = array.shape
    if array.dtype == np.uint8:
        array = np.float32(array) / 255.0
    count = array.shape[0]
    if count == 0 or count & (count - 1):
        pad = int(2 ** count.bit_length() - count)
        array = np.concatenate((array, np.zeros((pad, frames, channels, height, width))), axis=0)
    rows = 2 ** ((batch.bit_length() - 1) // 2)
    cols = array.shape[0] // rows
    array = array.reshape(rows, cols, frames, channels, height, width)
    array = array.transpose(2, 0, 4, 1, 5, 3).reshape(frames, rows * height, cols * width, channels)
    # After the step above the frames are never uint8: torch's scale factor is then 255.
    return (array.astype(np.float32) * 255).clip(0, 255).astype(np.uint8)


def gif_bytes(frames: np.ndarray, fps: float) -> tuple[bytes | None, str]:
    """``(GIF bytes, "")`` of *frames* through moviepy, or ``(None, why)`` without it.

    moviepy's ``editor`` module is what torch's writer uses; where it cannot
    be imported (moviepy missing, or moviepy 2, which has no ``editor``),
    torch's writer records no video, and so does memostore.
    """
    try:
        import moviepy  # noqa: F401
    except ImportError:
        return None, "add_video needs package moviepy"
    try:
        from moviepy import editor
    except ImportError:
        return None, (
            "moviepy is installed, but can't import moviepy.editor. "
            "Some packages could be missing [imageio, requests]"
        )
    import tempfile

    clip = editor.ImageSequenceClip(list(frames), fps=fps)
    with tempfile.NamedTemporaryFile(suffix=".gif") as f:
        # moviepy's keyword arguments changed between releases: the same
        # fallbacks as torch's writer, in the same order.
        try:
            clip.write_gif(f.name, verbose=False, logger=None)
        except TypeError:
            try:
                clip.write_gif(f.name, verbose=False, progress_bar=False)
            except TypeError:
                clip.write_gif(f.name, verbose=False)
        f.seek(0)
        return f.read(), ""


# -- precision-recall curves --------------------------------------------------------------------
def pr_curve_data(
    labels: Any, predictions: Any, num_thresholds: int, weights: Any = None
) -> tuple[np.ndarray, int]:
    """``(data, thresholds)``: the ``(6, T)`` rows tp, fp, tn, fn, precision, recall.

    Predictions fall in ``T = min(num_thresholds, 127)`` equal buckets of
    [0, 1]; counts are cumulated from the top bucket down, as torch's writer
    and TensorBoard's ``pr_curve`` summary compute them.
    """
    labels, predictions = make_array(labels), make_array(predictions)
    thresholds = min(int(num_thresholds), PR_MAX_THRESHOLDS)
    weights = 1.0 if weights is None else weights
    buckets = np.int32(np.floor(predictions * (thresholds - 1)))
    truth = labels.astype(np.float64)
    span = (0, thresholds - 1)
    tp_buckets, _ = np.histogram(buckets, bins=thresholds, range=span, weights=truth * weights)
    fp_buckets, _ = np.histogram(
        buckets, bins=thresholds, range=span, weights=(1.0 - truth) * weights
    )
    tp = np.cumsum(tp_buckets[::-1])[::-1]
    fp = np.cumsum(fp_buckets[::-1])[::-1]
    tn = fp[0] - fp
    fn = tp[0] - tp
    precision = tp / np.maximum(_PR_MIN_COUNT, tp + fp)
    recall = tp / np.maximum(_PR_MIN_COUNT, tp + fn)
    return np.stack((tp, fp, tn, fn, precision, recall)).astype(np.float64), thresholds


def pr_curve_raw_data(rows: tuple[Any, ...], num_thresholds: int) -> tuple[np.ndarray, int]:
    """``(data, thresholds)`` of caller-computed counts, stacked as torch's writer stacks them."""
    data = np.stack(rows)
    if data.ndim != 2:
        raise ValueError(f"the six PR curve rows must be one-dimensional, got shape {data.shape}")
    return data.astype(np.float64), min(int(num_thresholds), PR_MAX_THRESHOLDS)


# -- meshes ------------------------------------------------------------------------------------
def mesh_parts(
    vertices: Any, colors: Any, faces: Any, config_dict: Any
) -> tuple[str, int, list[tuple[str, np.ndarray]]]:
    """``(json_config, components, [(content type, float32 array)])`` of a mesh.

    Parts come in torch's order (vertices, faces, colors), each a ``(B, N, 3)``
    array of float32, the precision TensorBoard's mesh summary keeps.

    Raises:
        ValueError: a part is not three-dimensional (as TensorBoard's mesh metadata).
    """
    config = "{}" if config_dict is None else json.dumps(config_dict, sort_keys=True)
    given = [(vertices, "VERTEX"), (faces, "FACE"), (colors, "COLOR")]
    given = [(value, name) for value, name in given if value is not None]
    components = 0
    for _, name in given:
        components |= 1 << MESH_CONTENT[name]
    parts = []
    for value, name in given:
        array = _float_array(value)
        if array.ndim != 3:
            raise ValueError(f"Tensor shape should be of shape BxNx3, but got {list(array.shape)}.")
        parts.append((name, array))
    return config, components, parts


def _float_array(value: Any) -> np.ndarray:
    if is_torch_tensor(value):
        value = to_numpy(value)
    return np.ascontiguousarray(np.asarray(value), dtype="<f4")


# -- tensors -----------------------------------------------------------------------------------
# torch dtype name -> (TensorProto dtype, TensorProto field, numpy layout of the stored values).
_TENSOR_FIELDS = {
    "float16": ("DT_HALF", "half_val", "<i4"),
    "bfloat16": ("DT_BFLOAT16", "half_val", "<i4"),
    "float32": ("DT_FLOAT", "float_val", "<f4"),
    "float64": ("DT_DOUBLE", "double_val", "<f8"),
    "int8": ("DT_INT8", "int_val", "<i4"),
    "uint8": ("DT_UINT8", "uint32_val", "<u4"),
    "int16": ("DT_INT16", "int_val", "<i4"),
    "int32": ("DT_INT32", "int_val", "<i4"),
    "int64": ("DT_INT64", "int64_val", "<i8"),
    "complex32": ("DT_COMPLEX32", "scomplex_val", "<f4"),
    "complex64": ("DT_COMPLEX64", "scomplex_val", "<f4"),
    "complex128": ("DT_COMPLEX128", "dcomplex_val", "<f8"),
    "bool": ("DT_BOOL", "bool_val", "|b1"),
}


def tensor_parts(tag: str, tensor: Any) -> tuple[str, str, list[int], np.ndarray]:
    """``(dtype, field, shape, values)``: a torch tensor as torch's ``tensor_proto`` holds it.

    ``values`` is the flat content of the proto's repeated field. For float16
    and bfloat16 torch's writer stores each value's float32 bit pattern in
    ``half_val``; complex tensors are (real, imaginary) pairs.

    Raises:
        AttributeError: *tensor* is not a torch tensor (it has no ``numel``).
        ValueError: the tensor is 2 GB or more, or its dtype has no TensorProto form.
    """
    if tensor.numel() * tensor.itemsize >= 1 << 31:
        raise ValueError("tensor is bigger than protocol buffer's hard limit of 2GB in size")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _TENSOR_FIELDS:
        raise ValueError(f"{tag} has unsupported tensor dtype {tensor.dtype}")
    import torch

    dtype, field, layout = _TENSOR_FIELDS[name]
    flat = tensor.detach().cpu().reshape(-1)
    if field == "half_val":
        values = flat.to(torch.float32).numpy().view("<i4")
    elif tensor.is_complex():
        values = torch.view_as_real(flat).reshape(-1).to(torch.float64).numpy()
    else:
        values = flat.numpy()
    return dtype, field, list(tensor.shape), np.ascontiguousarray(values, dtype=layout)


# -- custom scalars ------------------------------------------------------------------------------
def custom_layout(layout: Any) -> list[list[Any]]:
    """A custom-scalars layout as ``[[category, [[title, "Margin"|"Multiline", tags]]]]``.

    A chart whose type is not ``"Margin"`` is a multiline chart, as in torch's writer.

    Raises:
        AssertionError: a margin chart does not name exactly three tags.
        TypeError: a category, title or tag is not a string.
    """
    out = []
    for category, charts in layout.items():
        rows = []
        for title, chart in charts.items():
            kind, tags = chart[0], list(chart[1])
            if kind == "Margin" and len(tags) != 3:
                raise AssertionError("len(tags) != 3")
            for name in (category, title, *tags):
                if not isinstance(name, str):
                    raise TypeError(f"a custom scalars name must be a str, not {type(name)}")
            rows.append([title, "Margin" if kind == "Margin" else "Multiline", tags])
        out.append([category, rows])
    return out


# -- embeddings --------------------------------------------------------------------------------
def encode_tag(tag: str) -> str:
    """An embedding tag as a directory name: ``%``, ``/`` and ``\\`` percent-encoded."""
    return tag.replace("%", "%25").replace("/", "%2f").replace("\\", "%5c")


def embedding_subdir(step: int, tag: str) -> str:
    """Where an embedding's files go in its run: ``<step, 5 digits>/<encoded tag>``."""
    return f"{str(step).zfill(5)}/{encode_tag(tag)}"


def metadata_tsv(metadata: Any, header: Any = None) -> bytes:
    """``metadata.tsv`` as torch's writer writes it: one label (or header row, rows) a line.

    Raises:
        AssertionError: the header and the first row differ in length.
    """
    if not header:
        lines = [str(x) for x in metadata]
    else:
        if len(header) != len(metadata[0]):
            raise AssertionError("len of header must be equal to the number of columns in metadata")
        lines = ["\t".join(str(e) for e in row) for row in [header, *metadata]]
    return ("\n".join(lines) + "\n").encode("utf-8")


def sprite_pixels(label_img: Any) -> np.ndarray:
    """The sprite of an ``(N, C, H, W)`` batch: a square RGB grid of ``ceil(sqrt(N))`` columns.

    Pixels are taken as [0, 1] (scaled by 255 and clipped, whatever the
    dtype), as torch's writer takes them.
    """
    array = make_array(label_img)
    cols = math.ceil(array.shape[0] ** 0.5)
    grid = tile_grid(array, cols).transpose(1, 2, 0)
    square = np.zeros((grid.shape[1], grid.shape[1], 3))
    square[: grid.shape[0], :, :] = grid
    return np.uint8((square * 255).clip(0, 255))


def embedding_parts(
    mat: Any, metadata: Any = None, label_img: Any = None, metadata_header: Any = None
) -> tuple[np.ndarray, bytes | None, np.ndarray | None, list[int] | None]:
    """``(matrix, metadata TSV, sprite pixels, [sprite width, height])`` of an embedding.

    Checked as torch's writer checks them, all before anything is stored.

    Raises:
        AssertionError: labels or images do not match the points, or *mat* is not 2-D.
        ValueError: *mat* is not numeric.
    """
    matrix = make_array(mat)
    tsv = sprite = dim = None
    if metadata is not None:
        if matrix.shape[0] != len(metadata):
            raise AssertionError("#labels should equal with #data points")
        tsv = metadata_tsv(metadata, metadata_header)
    if label_img is not None:
        if matrix.shape[0] != label_img.shape[0]:
            raise AssertionError("#images should equal with #data points")
        sprite = sprite_pixels(label_img)
        dim = [int(label_img.shape[3]), int(label_img.shape[2])]
    if matrix.ndim != 2:
        raise AssertionError("mat should be 2D, where mat.size(0) is the number of data points")
    if matrix.dtype.kind not in "biufc":
        raise ValueError(f"an embedding matrix must be numeric, not {matrix.dtype}")
    return np.ascontiguousarray(matrix), tsv, sprite, dim


def tensors_tsv(matrix: np.ndarray) -> bytes:
    """``tensors.tsv`` of an embedding matrix: one point a line, each value as ``str``."""
    lines = ["\t".join(str(x.item()) for x in row) + "\n" for row in matrix]
    return "".join(lines).encode("utf-8")
