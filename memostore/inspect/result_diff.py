"""Numeric comparison of stored tensors and arrays, read from their blobs.

``memostore diff`` compares values from the store without restoring them: a
tensor is read straight from its blob (a one-tensor safetensors file, see
``torch_codecs/blobs.py``; a numpy array's blob is its raw C-order bytes) into
a numpy array, so no codec and no code from the store runs, and torch is never
imported. Tensors larger than :data:`MAX_COMPARE_BYTES` and dtypes numpy
cannot represent (float8, bit-packed integers) are reported as differing
without numbers.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any

from ..errors import MemostoreError

# A pair of tensors above this size (each) is not read to compare it.
MAX_COMPARE_BYTES = 256 << 20
TENSOR_TAG = "torch.tensor"
NDARRAY_TAG = "ndarray"

# safetensors dtype code -> numpy dtype name; BF16 is widened by hand.
_SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
    "C64": "<c8",
}


class NotComparable(ValueError):
    """A stored tensor that cannot be read as numbers here (the message says why)."""


def is_array_node(node: Any) -> bool:
    """Whether *node* is a stored torch tensor or numpy array."""
    return isinstance(node, dict) and node.get("$") in (TENSOR_TAG, NDARRAY_TAG)


def node_dtype(node: Mapping[str, Any]) -> str:
    """The dtype name of a tensor or array node (``float32``), as ``show`` prints it."""
    if node.get("$") == NDARRAY_TAG:
        from ..values.summaries import numpy_dtype_name

        descr = node.get("descr")
        return numpy_dtype_name(descr) if isinstance(descr, str) else str(descr)
    return str(node.get("dtype"))


def node_shape(node: Mapping[str, Any]) -> list[int]:
    """The shape of a tensor or array node."""
    shape = node.get("shape")
    return [int(n) for n in shape] if isinstance(shape, list) else []


def data_key(node: Mapping[str, Any]) -> Any:
    """What identifies a tensor or array node's bytes: equal keys are equal data."""
    if node.get("$") == NDARRAY_TAG:
        return ("blob", node.get("blob"), json.dumps(node.get("items"), sort_keys=True))
    data = node.get("data")
    if not isinstance(data, dict):
        return ("none", json.dumps(data, sort_keys=True))
    base = data.get("base")
    if isinstance(base, dict):
        return ("view", base.get("blob"), data.get("offset"), json.dumps(data.get("stride")))
    return ("blob", data.get("blob"))


def compare_array_nodes(objects: Any, a: Mapping[str, Any], b: Mapping[str, Any]) -> Any:
    """How two stored tensors (or arrays) differ, or None when they hold the same data.

    Returns:
        None when dtype, shape and bytes are equal; else a dict with ``shape``
        (``[a, b]`` when the shapes differ), ``dtype`` (``[a, b]`` when they
        differ) and, when both can be read, ``max_abs_diff`` and ``rel_norm``
        (‖a-b‖/‖a‖), or ``note`` saying why no numbers are given.
    """
    dtype_a, dtype_b = node_dtype(a), node_dtype(b)
    shape_a, shape_b = node_shape(a), node_shape(b)
    dtype: Any = dtype_a if dtype_a == dtype_b else [dtype_a, dtype_b]
    if shape_a != shape_b:
        return {"shape": [shape_a, shape_b], "dtype": dtype}
    if dtype_a == dtype_b and data_key(a) == data_key(b):
        return None
    try:
        x, y = node_array(objects, a), node_array(objects, b)
    except NotComparable as exc:
        return {"shape": shape_a, "dtype": dtype, "note": str(exc)}
    stats = tensor_difference(x, y)
    if stats is None and dtype_a == dtype_b:
        return None  # equal values stored differently (a view against a copy)
    out: dict[str, Any] = {"shape": shape_a, "dtype": dtype}
    if stats is not None:
        out.update(max_abs_diff=stats["max_abs_diff"], rel_norm=stats["rel_norm"])
    else:
        out.update(max_abs_diff=0.0, rel_norm=0.0)
    return out


def node_array(objects: Any, node: Mapping[str, Any]) -> Any:
    """The values of a stored tensor or array as a numpy array (read from its blob).

    Raises:
        NotComparable: no data (a meta tensor), a sparse layout, a dtype numpy
            lacks, too large, or the blob cannot be read.
    """
    import numpy as np

    shape = node_shape(node)
    if node.get("$") == NDARRAY_TAG:
        descr = node.get("descr")
        if not isinstance(descr, str) or descr == "|O" or not isinstance(node.get("blob"), str):
            raise NotComparable("an object or structured array: compared by its bytes only")
        raw = _read_blob(objects, node["blob"])
        return np.frombuffer(raw, dtype=np.dtype(descr)).reshape(shape)
    if node.get("layout"):
        raise NotComparable(f"a {node['layout']} tensor: compared by its bytes only")
    data = node.get("data")
    if not isinstance(data, dict):
        raise NotComparable("a tensor without data (meta device)")
    base = data.get("base")
    if isinstance(base, dict):
        whole = _blob_array(objects, base.get("blob"), node_shape(base)).reshape(-1)
        return _strided(whole, shape, data.get("offset"), data.get("stride"))
    return _blob_array(objects, data.get("blob"), shape)


def _read_blob(objects: Any, blob_id: Any) -> bytes:
    if not isinstance(blob_id, str):
        raise NotComparable("no blob recorded")
    try:
        size = objects.size_of(blob_id)
        if size > MAX_COMPARE_BYTES:
            raise NotComparable(f"too large to compare here ({size >> 20} MiB)")
        return objects.get_bytes(blob_id)
    except (MemostoreError, OSError) as exc:
        raise NotComparable(f"cannot read blob {blob_id[:12]}: {exc}") from None


def _blob_array(objects: Any, blob_id: Any, shape: list[int]) -> Any:
    """A one-tensor safetensors blob as a numpy array of *shape*."""
    import numpy as np

    raw = _read_blob(objects, blob_id)
    if len(raw) < 8:
        raise NotComparable("a malformed tensor blob")
    (length,) = struct.unpack_from("<Q", raw, 0)
    try:
        header = json.loads(raw[8 : 8 + length])
        entry = header["tensor"]
        code = entry["dtype"]
        start, end = (8 + length + int(n) for n in entry["data_offsets"])
    except (ValueError, KeyError, TypeError):
        raise NotComparable("a malformed tensor blob") from None
    metadata = header.get("__metadata__") or {}
    body = raw[start:end]
    if code == "BF16":
        # bfloat16 is the upper half of a float32: widen it exactly.
        halves = np.frombuffer(body, dtype="<u2").astype(np.uint32)
        values = (halves << 16).view(np.float32)
    elif code in _SAFETENSORS_DTYPES and (code != "U8" or "torch.dtype" not in metadata):
        values = np.frombuffer(body, dtype=np.dtype(_SAFETENSORS_DTYPES[code]))
        if metadata.get("torch.dtype") in ("complex128", "complex32"):
            # Stored as (real, imaginary) pairs in a trailing dimension.
            values = values.astype(np.float64).view(np.complex128)
    else:
        name = metadata.get("torch.dtype") or code
        raise NotComparable(f"{name} values cannot be read without torch: compared by bytes only")
    count = math.prod(shape)
    if values.size != count:
        raise NotComparable("the blob does not match the recorded shape")
    return values.reshape(shape)


def _strided(whole: Any, shape: list[int], offset: Any, stride: Any) -> Any:
    """The view ``(offset, stride)`` of a flat array, checked to lie inside it."""
    import numpy as np

    if (
        not isinstance(offset, int)
        or not isinstance(stride, list)
        or len(stride) != len(shape)
        or offset < 0
        or any(not isinstance(s, int) or s < 0 for s in stride)
    ):
        raise NotComparable("a malformed tensor view")
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=whole.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if last >= whole.size:
        raise NotComparable("a tensor view outside its base")
    item = whole.itemsize
    return np.lib.stride_tricks.as_strided(
        whole[offset:], shape=shape, strides=[s * item for s in stride], writeable=False
    )


def tensor_difference(a: Any, b: Any) -> dict[str, Any] | None:
    """Max abs difference and relative norm ‖a-b‖/‖a‖ of two numpy arrays; None when equal.

    Arrays of different shapes give ``{"shape": [a, b], "dtype": ...}``. NaN
    equals NaN at the same position.
    """
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    shape_a, shape_b = list(a.shape), list(b.shape)
    dtype_a, dtype_b = str(a.dtype), str(b.dtype)
    if shape_a != shape_b:
        return {"shape": [shape_a, shape_b], "dtype": [dtype_a, dtype_b]}
    if a.dtype.hasobject or b.dtype.hasobject:
        equal = bool(np.array_equal(a, b))
        return None if equal else _stats(shape_a, dtype_a, dtype_b, math.nan, math.nan, math.nan)
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    x, y = a.astype(wide), b.astype(wide)
    nan_both = np.isnan(x) & np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.where(nan_both, 0, np.abs(x - y))
    nan_mismatch = bool((np.isnan(x) ^ np.isnan(y)).any())
    max_abs = float(np.nanmax(delta)) if delta.size else 0.0
    if nan_mismatch:
        max_abs = math.nan
    if dtype_a == dtype_b and max_abs == 0.0:
        return None
    norm_a = float(np.sqrt(np.sum(np.abs(np.where(nan_both, 0, x)) ** 2)))
    norm_d = float(np.sqrt(np.nansum(delta**2)))
    return _stats(shape_a, dtype_a, dtype_b, max_abs, norm_d, norm_a)


def _stats(
    shape: list[int], dtype_a: str, dtype_b: str, max_abs: float, norm_d: float, norm_a: float
) -> dict[str, Any]:
    # Relative to the first tensor; an all-zero first tensor makes any change infinite.
    relative = norm_d / norm_a if norm_a else (0.0 if norm_d == 0 else math.inf)
    return {
        "shape": shape,
        "dtype": dtype_a if dtype_a == dtype_b else [dtype_a, dtype_b],
        "max_abs_diff": json_float(max_abs),
        "rel_norm": json_float(relative),
    }


def json_float(value: float) -> float | str:
    """A float for JSON: NaN and infinities as text."""
    return value if math.isfinite(value) else str(value)
