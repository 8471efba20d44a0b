"""Turning what users log (tensors, arrays, figures) into storable points.

Images and histograms are computed as ``torch.utils.tensorboard`` computes
them: floating-point pixels are in [0, 1] and scaled by 255, ``uint8``
pixels are taken as they are, ``dataformats`` names the axes, grey images
become RGB and batches are tiled; histogram buckets are its buckets. PNG
files are encoded here (zlib and struct), deterministically, so equal images
give equal blobs.
"""

from __future__ import annotations

import math
import struct
import sys
import zlib
from typing import Any

import numpy as np

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type


def _torch_tensor_type() -> Any:
    # A torch tensor can only exist once torch was imported: never import it here.
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def is_torch_tensor(value: Any) -> bool:
    """Whether *value* is a ``torch.Tensor`` (without importing torch)."""
    tensor_type = _torch_tensor_type()
    return tensor_type is not None and isinstance(value, tensor_type)


def make_array(value: Any) -> np.ndarray:
    """An array as torch's writer makes one (``make_np``): arrays, scalars, tensors only.

    A bfloat16 tensor becomes float16, as torch's writer converts it.

    Raises:
        NotImplementedError: *value* is a list, dict or other object (as torch's writer).
    """
    if isinstance(value, np.ndarray):
        return value
    if np.isscalar(value):
        return np.array([value])
    if is_torch_tensor(value):
        import torch

        if value.dtype == torch.bfloat16:
            value = value.to(torch.float16)
        return value.detach().cpu().numpy()
    raise NotImplementedError(f"Got {type(value)}, but numpy array or torch tensor are expected.")


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor, array or nested list as a NumPy array (no torch import)."""
    if isinstance(value, np.ndarray):
        return value
    detach = getattr(value, "detach", None)
    if callable(detach):  # a torch tensor: move to CPU, drop autograd
        value = detach()
        if getattr(value, "dtype", None) is not None and "bfloat16" in str(value.dtype):
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of an ``(H, W, C)`` uint8 array, C in 1 (grey), 2, 3 (RGB), 4 (RGBA)."""
    height, width, channels = pixels.shape
    color_type = _PNG_COLOR_TYPES[channels]
    rows = np.ascontiguousarray(pixels, dtype=np.uint8).reshape(height, width * channels)
    # Filter type 0 (none) on every row: a zero byte before each row's pixels.
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"".join(
        [
            _PNG_SIGNATURE,
            chunk(b"IHDR", header),
            chunk(b"IDAT", zlib.compress(raw, 6)),
            chunk(b"IEND", b""),
        ]
    )


def png_size(data: bytes) -> tuple[int, int, int]:
    """(height, width, channels) read from a PNG's header."""
    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError("not a PNG image")
    width, height, _, color_type = struct.unpack(">IIBB", data[16:26])
    channels = {0: 1, 4: 2, 2: 3, 6: 4, 3: 3}.get(color_type, 3)
    return height, width, channels


def tile_grid(nchw: np.ndarray, cols: int = 8) -> np.ndarray:
    # torch's make_grid: grey becomes RGB, only RGB is tiled, at most *cols* per row.
    if nchw.shape[1] == 1:
        nchw = np.concatenate([nchw, nchw, nchw], 1)
    if nchw.ndim != 4 or nchw.shape[1] != 3:
        raise AssertionError("Input should be a 4D numpy array with 3 channels")
    count, _, height, width = nchw.shape
    cols = min(count, cols)
    rows = math.ceil(count / cols)
    canvas = np.zeros((3, height * rows, width * cols), dtype=nchw.dtype)
    for i in range(count):
        r, c = divmod(i, cols)
        canvas[:, r * height : (r + 1) * height, c * width : (c + 1) * width] = nchw[i]
    return canvas


def to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    """*array* as ``(H, W, C)`` following torch's ``convert_to_HWC``.

    Four axes (``NCHW`` in any order) are tiled 8 per row into one RGB image;
    three (``CHW`` in any order) are transposed, one channel made RGB; two
    (``HW``/``WH``) become RGB.

    Raises:
        AssertionError: a repeated axis letter, or the shape and format differ in length.
    """
    if len(set(dataformats)) != len(dataformats):
        raise AssertionError(
            f"You can not use the same dimension shorthand twice. input_format: {dataformats}"
        )
    if array.ndim != len(dataformats):
        raise AssertionError(
            f"size of input tensor and input format are different. "
            f"tensor shape: {array.shape}, input_format: {dataformats}"
        )
    fmt = dataformats.upper()
    if len(fmt) == 4:
        nchw = array.transpose([fmt.find(c) for c in "NCHW"])
        return tile_grid(nchw).transpose(1, 2, 0)
    if len(fmt) == 3:
        hwc = array.transpose([fmt.find(c) for c in "HWC"])
        if hwc.shape[2] == 1:
            hwc = np.concatenate([hwc, hwc, hwc], 2)
        return hwc
    if len(fmt) == 2:
        hw = array.transpose([fmt.find(c) for c in "HW"])
        return np.stack([hw, hw, hw], 2)
    raise ValueError(f"unsupported dataformats {dataformats!r}")


def to_uint8(array: np.ndarray) -> np.ndarray:
    """Pixels as uint8: uint8 kept, anything else taken as [0, 1], scaled by 255 and truncated."""
    if array.dtype == np.uint8:
        return array
    # float32 first, as torch's writer computes; NaN (undefined in a uint8 cast) is black.
    scaled = np.nan_to_num(array.astype(np.float32) * 255, nan=0.0)
    return scaled.clip(0, 255).astype(np.uint8)


def image_pixels(img: Any, dataformats: str = "CHW") -> np.ndarray:
    """One image as ``(H, W, C)`` uint8 (C in 2..4), as torch's writer makes it.

    A grey image becomes RGB and a batch (a format with ``N``) is tiled, as
    in torch's writer; two channels stay grey and alpha, four RGBA.
    """
    hwc = to_uint8(to_hwc(to_numpy(img), dataformats))
    channels = hwc.shape[2]
    if channels not in _PNG_COLOR_TYPES:
        raise TypeError(f"Cannot handle this data type: {(1, 1, channels)}, |u1")
    return hwc


def boxed_pixels(
    img: Any, boxes: Any, rescale: float = 1, dataformats: str = "CHW", labels: Any = None
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """An image with boxes drawn on it, as torch's ``add_image_with_boxes`` draws them.

    Returns the pixels (resized by *rescale*, Lanczos) and the ``(height,
    width, channels)`` torch's writer records, which are those before
    resizing. Each box ``[x1, y1, x2, y2]`` is a red outline 2 pixels wide;
    its label, if any, is written in black on red above its bottom-left
    corner, in Pillow's default font. Needs Pillow.
    """
    from PIL import Image, ImageDraw, ImageFont

    hwc = to_hwc(make_array(img), dataformats)
    boxes = make_array(boxes)
    pixels = to_uint8(hwc)
    height, width, channels = pixels.shape
    image = Image.fromarray(pixels)
    font = ImageFont.load_default()
    draw = ImageDraw.Draw(image)
    for i in range(boxes.shape[0]):
        left, top, right, bottom = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        outline = [(left, top), (left, bottom), (right, bottom), (right, top), (left, top)]
        draw.line(outline, width=2, fill="Red")
        label = None if labels is None else labels[i]
        if label:
            x0, y0, x1, y1 = font.getbbox(label)
            text_w, text_h = x1 - x0, y1 - y0
            margin = np.ceil(0.05 * text_h)
            backdrop = [(left, bottom - text_h - 2 * margin), (left + text_w, bottom)]
            draw.rectangle(backdrop, fill="Red")
            draw.text((left + margin, bottom - text_h - margin), label, fill="black", font=font)
    size = (int(width * rescale), int(height * rescale))
    image = image.resize(size, Image.Resampling.LANCZOS)
    return np.asarray(image).reshape(size[1], size[0], -1), (height, width, channels)


def figure_png(figure: Any, close: bool = True) -> bytes:
    """PNG bytes of a matplotlib figure (or a grid of a list of them), RGB as torch's writer.

    Each figure is drawn on a new Agg canvas, its alpha dropped; a list is tiled 8 per row.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = figure if isinstance(figure, list) else [figure]
    tiles = []
    for fig in figures:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        rgb = np.asarray(canvas.buffer_rgba())[:, :, :3]
        tiles.append(np.moveaxis(rgb, 2, 0))
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)
    if isinstance(figure, list):
        return encode_png(image_pixels(np.stack(tiles), "NCHW"))
    return encode_png(image_pixels(tiles[0], "CHW"))


# -- histograms -----------------------------------------------------------------------------
def _tensorflow_edges() -> np.ndarray:
    # TensorBoard's default buckets: +-1e-12 growing by 10% up to 1e20, and 0.
    v = 1e-12
    positive = []
    while v < 1e20:
        positive.append(v)
        v *= 1.1
    pos = np.array(positive)
    return np.concatenate([-pos[::-1], [0.0], pos])


_TF_EDGES = _tensorflow_edges()


def histogram(values: Any, bins: Any = "tensorflow", max_bins: int | None = None) -> dict[str, Any]:
    """Statistics and bucket counts of *values*, computed as torch's writer computes them.

    ``bins`` is ``"tensorflow"`` (TensorBoard's default edges) or anything
    ``numpy.histogram`` takes. With ``max_bins``, runs of ``len // max_bins``
    buckets are merged (the last run padded with empty buckets). Only the
    span from the first to the last non-empty bucket is kept, preceded by
    one empty bucket; ``limits[i]`` is the right edge of bucket ``i``.
    Non-finite values count in the statistics and in no bucket.

    Raises:
        ValueError: no values, a range numpy cannot bin (``bins="auto"`` over
            NaN), or no value in any bucket (as torch's writer).
    """
    data = to_numpy(values).astype(float).reshape(-1)
    if data.size == 0:
        raise ValueError("The input has no element.")
    edges = _TF_EDGES if isinstance(bins, str) and bins == "tensorflow" else bins
    counts, limits = np.histogram(data, bins=edges)
    if max_bins is not None and len(counts) > max_bins:
        group = len(counts) // max_bins
        if len(counts) % group:
            counts = np.pad(counts, [[0, group - len(counts) % group]])
        counts = counts.reshape(-1, group).sum(axis=-1)
        limits = np.concatenate([limits[:-1:group], limits[-1:]])
    nonzero = np.flatnonzero(counts)
    if not len(nonzero):
        raise ValueError("The histogram is empty: no value falls in any bucket")
    first, last = int(nonzero[0]), int(nonzero[-1])
    return {
        "min": float(data.min()),
        "max": float(data.max()),
        "num": float(data.size),
        "sum": float(data.sum()),
        "sum_squares": float(data.dot(data)),
        # One empty bucket before the first non-empty one marks where that one begins.
        "limits": limits[first : last + 2].tolist(),
        "counts": [0.0, *counts[first : last + 1].astype(np.float64).tolist()],
    }
