"""Turning what users log (tensors, arrays, figures) into storable points.

Images follow ``torch.utils.tensorboard``: floating-point pixels are in
[0, 1] and scaled by 255, ``uint8`` pixels are taken as they are, and
``dataformats`` names the axes. PNG files are encoded here (zlib and struct),
deterministically, so equal images give equal blobs.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

import numpy as np

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type


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


def to_float(value: Any) -> float:
    """One number from a Python number, NumPy scalar or one-element tensor/array."""
    try:
        return float(value)
    except TypeError:
        array = to_numpy(value)
        if array.size != 1:
            raise ValueError(f"expected one number, got an array of shape {array.shape}") from None
        return float(array.reshape(-1)[0])


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


def _to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    fmt = dataformats.upper()
    if array.ndim != len(fmt):
        raise ValueError(f"image of shape {array.shape} does not match dataformats {dataformats!r}")
    if fmt in ("HW", "WH"):
        array = array if fmt == "HW" else array.T
        return array[:, :, None]
    if sorted(fmt) != sorted("CHW"):
        raise ValueError(f"unsupported dataformats {dataformats!r}")
    return np.transpose(array, [fmt.index("H"), fmt.index("W"), fmt.index("C")])


def _to_uint8(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8:
        return array
    scaled = np.nan_to_num(array.astype(np.float32) * 255.0, nan=0.0)
    return np.clip(scaled, 0, 255).astype(np.uint8)


def image_pixels(img: Any, dataformats: str = "CHW") -> np.ndarray:
    """One image as an ``(H, W, C)`` uint8 array (C in 1..4)."""
    hwc = _to_uint8(_to_hwc(to_numpy(img), dataformats))
    channels = hwc.shape[2]
    if channels > 4:
        raise ValueError(f"an image has 1 to 4 channels, this one has {channels}")
    return hwc


def grid_pixels(imgs: Any, dataformats: str = "NCHW") -> np.ndarray:
    """A batch of images tiled into one (up to 8 per row), as torch's writer does."""
    array = to_numpy(imgs)
    fmt = dataformats.upper()
    if array.ndim != len(fmt) or "N" not in fmt:
        raise ValueError(f"images of shape {array.shape} do not match dataformats {dataformats!r}")
    batch = np.moveaxis(array, fmt.index("N"), 0)
    rest = fmt.replace("N", "")
    tiles = [image_pixels(batch[i], rest) for i in range(batch.shape[0])]
    if not tiles:
        raise ValueError("no images to log")
    channels = max(t.shape[2] for t in tiles)
    tiles = [t if t.shape[2] == channels else np.repeat(t[:, :, :1], channels, 2) for t in tiles]
    h, w = tiles[0].shape[:2]
    cols = min(len(tiles), 8)
    rows = math.ceil(len(tiles) / cols)
    canvas = np.zeros((rows * h, cols * w, channels), np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        canvas[r * h : r * h + tile.shape[0], c * w : c * w + tile.shape[1]] = tile[:h, :w]
    return canvas


def figure_png(figure: Any, close: bool = True) -> bytes:
    """PNG bytes of a matplotlib figure (or a grid of a list of figures)."""
    figures = figure if isinstance(figure, (list, tuple)) else [figure]
    tiles = []
    for fig in figures:
        fig.canvas.draw()
        tiles.append(np.asarray(fig.canvas.buffer_rgba())[:, :, :4].copy())
        if close:
            try:
                import matplotlib.pyplot as plt

                plt.close(fig)
            except Exception:
                pass
    if len(tiles) == 1:
        return encode_png(tiles[0])
    return encode_png(grid_pixels(np.stack(tiles), "NHWC"))


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
    """Statistics and non-empty bucket counts of *values*, like TensorBoard's.

    ``limits[i]`` is the right edge of bucket ``i``; the first bucket is empty
    and only marks where the second begins. Non-finite values count in the
    statistics but fall in no bucket.
    """
    data = to_numpy(values).astype(np.float64, copy=False).reshape(-1)
    if data.size == 0:
        raise ValueError("cannot make a histogram of no values")
    finite = data[np.isfinite(data)]
    if isinstance(bins, str) and bins == "tensorflow":
        edges = _TF_EDGES
    elif len(finite):
        edges = np.histogram_bin_edges(finite, bins=bins)
    else:
        edges = np.array([0.0, 1.0])
    counts, edges = np.histogram(finite, bins=edges)
    counts = counts.astype(np.float64)
    if max_bins is not None and len(counts) > max_bins > 0:
        group = math.ceil(len(counts) / max_bins)
        pad = (-len(counts)) % group
        counts = np.concatenate([counts, np.zeros(pad)]).reshape(-1, group).sum(axis=1)
        edges = np.concatenate([edges[::group], edges[-1:]])[: len(counts) + 1]
    nonzero = np.flatnonzero(counts)
    if len(nonzero):
        first, last = int(nonzero[0]), int(nonzero[-1])
        limits = np.concatenate([[edges[first]], edges[first + 1 : last + 2]])
        counts = np.concatenate([[0.0], counts[first : last + 1]])
    else:
        limits, counts = np.array([0.0]), np.array([0.0])
    return {
        "min": float(data.min()),
        "max": float(data.max()),
        "num": float(data.size),
        "sum": float(data.sum()),
        "sum_squares": float(np.dot(data, data)),
        "limits": limits.tolist(),
        "counts": counts.tolist(),
    }
