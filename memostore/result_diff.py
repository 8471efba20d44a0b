"""Numeric comparison of two restored results: which tensors differ, and by how much.

Results are walked in parallel: mappings by key, sequences by position,
modules, optimizers and schedulers through their ``state_dict()``, plain
objects through their attributes. Tensors (torch or numpy) are compared
element-wise; other leaves by equality. torch is never imported here: a torch
tensor is recognised by its type's module and handled through its own methods.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

MAX_LEAVES = 100_000
MAX_DEPTH = 32
_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _is_torch_tensor(obj: Any) -> bool:
    return (
        type(obj).__module__.startswith("torch")
        and hasattr(obj, "detach")
        and hasattr(obj, "dtype")
    )


def _is_ndarray(obj: Any) -> bool:
    return type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray"


def is_tensor(obj: Any) -> bool:
    """True for a torch tensor or a numpy array."""
    return _is_torch_tensor(obj) or _is_ndarray(obj)


def flatten(obj: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of a result; tensors and scalars are leaves."""
    if depth > MAX_DEPTH or isinstance(obj, _SCALARS) or is_tensor(obj):
        yield path or "<result>", obj
        return
    state_dict = getattr(obj, "state_dict", None)
    if callable(state_dict) and not isinstance(obj, type):
        try:
            state = state_dict()
        except Exception:
            state = None
        if isinstance(state, Mapping):
            yield from flatten(state, path, depth + 1)
            return
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from flatten(value, f"{path}[{key!r}]", depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from flatten(value, f"{path}[{i}]", depth + 1)
        return
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict) and attributes:
        for key, value in attributes.items():
            yield from flatten(value, f"{path}.{key}" if path else key, depth + 1)
        return
    yield path or "<result>", obj


def compare_leaves(a: Any, b: Any) -> tuple[dict[str, Any], bool]:
    """Compare two results; return ({"tensors", "values", "compared", ...}, identical)."""
    leaves_a = dict(_limited(flatten(a)))
    leaves_b = dict(_limited(flatten(b)))
    tensors: list[dict[str, Any]] = []
    values: list[dict[str, Any]] = []
    compared = 0
    for path in list(leaves_a) + [p for p in leaves_b if p not in leaves_a]:
        in_a, in_b = path in leaves_a, path in leaves_b
        if not (in_a and in_b):
            values.append(
                {
                    "path": path,
                    "a": _text(leaves_a[path]) if in_a else None,
                    "b": _text(leaves_b[path]) if in_b else None,
                    "change": "removed" if in_a else "added",
                }
            )
            continue
        left, right = leaves_a[path], leaves_b[path]
        compared += 1
        if is_tensor(left) and is_tensor(right):
            stats = tensor_difference(left, right)
            if stats is not None:
                tensors.append({"path": path, **stats})
        elif not _equal(left, right):
            values.append({"path": path, "a": _text(left), "b": _text(right), "change": "changed"})
    report = {"compared": compared, "tensors": tensors, "values": values}
    return report, not tensors and not values


def tensor_difference(a: Any, b: Any) -> dict[str, Any] | None:
    """Max abs difference and relative norm ‖a-b‖/‖a‖, or None when equal."""
    try:
        if _is_torch_tensor(a) and _is_torch_tensor(b):
            return _torch_difference(a, b)
        return _numpy_difference(_as_numpy(a), _as_numpy(b))
    except Exception as exc:  # an exotic dtype or layout: say so, do not fail the diff
        return {"error": f"{type(exc).__name__}: {exc}"}


def _torch_difference(a: Any, b: Any) -> dict[str, Any] | None:
    a, b = a.detach().cpu(), b.detach().cpu()
    shape_a, shape_b = list(a.shape), list(b.shape)
    dtype_a, dtype_b = str(a.dtype).replace("torch.", ""), str(b.dtype).replace("torch.", "")
    if shape_a != shape_b:
        return {"shape": [shape_a, shape_b], "dtype": [dtype_a, dtype_b]}
    wide = _torch_wide(a)
    x, y = a.to(wide), b.to(wide)
    nan_both = x.isnan() & y.isnan()
    delta = (x - y).abs()
    delta = delta.masked_fill(nan_both, 0)
    unchanged = delta.numel() == 0 or float(delta.max()) == 0.0
    if dtype_a == dtype_b and unchanged and not bool((x.isnan() ^ y.isnan()).any()):
        return None
    max_abs = float(delta.max()) if delta.numel() else 0.0
    norm_a = float(x.masked_fill(nan_both, 0).abs().pow(2).sum().sqrt())
    norm_d = float(delta.pow(2).sum().sqrt())
    return _stats(shape_a, dtype_a, dtype_b, max_abs, norm_d, norm_a)


def _torch_wide(t: Any) -> Any:
    import torch

    return torch.complex128 if t.is_complex() else torch.float64


def _as_numpy(t: Any) -> Any:
    import numpy as np

    if _is_torch_tensor(t):
        t = t.detach().cpu()
        t = t.double() if not t.is_complex() else t
        return t.numpy()
    return np.asarray(t)


def _numpy_difference(a: Any, b: Any) -> dict[str, Any] | None:
    import numpy as np

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
    delta = np.where(nan_both, 0, np.abs(x - y))
    nan_mismatch = bool((np.isnan(x) ^ np.isnan(y)).any())
    max_abs = float(delta.max()) if delta.size else 0.0
    if dtype_a == dtype_b and max_abs == 0.0 and not nan_mismatch:
        return None
    norm_a = float(np.sqrt(np.sum(np.abs(np.where(nan_both, 0, x)) ** 2)))
    norm_d = float(np.sqrt(np.sum(delta**2)))
    return _stats(shape_a, dtype_a, dtype_b, max_abs, norm_d, norm_a)


def _stats(
    shape: list[int], dtype_a: str, dtype_b: str, max_abs: float, norm_d: float, norm_a: float
) -> dict[str, Any]:
    # Relative to the first tensor; an all-zero first tensor makes any change infinite.
    relative = norm_d / norm_a if norm_a else (0.0 if norm_d == 0 else math.inf)
    return {
        "shape": shape,
        "dtype": dtype_a if dtype_a == dtype_b else [dtype_a, dtype_b],
        "max_abs_diff": _json_float(max_abs),
        "rel_norm": _json_float(relative),
    }


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        result = a == b
        if isinstance(result, bool):
            return result
        return bool(result)
    except Exception:
        return False


def _text(value: Any) -> str:
    if is_tensor(value):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{type(value).__name__}({dtype}, {list(value.shape)})"
    text = repr(value)
    return text if len(text) <= 100 else text[:99] + "…"


def _limited(items: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    for i, item in enumerate(items):
        if i >= MAX_LEAVES:
            return
        yield item
