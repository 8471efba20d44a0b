"""Checking what ``SummaryWriter`` is given, refusing what TensorBoard's writers refuse.

Each check raises the exception ``torch.utils.tensorboard`` raises for the
same input (type and message), for input that tensorboardX refuses too; what
either of them accepts is accepted (tensorboardX takes lists where torch
wants arrays, torch takes ``"1.5"`` as a number). A check runs before anything
is stored, so a refused point leaves no trace.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import convert

# What numpy.histogram accepts as a string for bins, and TensorBoard's own default.
_BIN_ESTIMATORS = frozenset(
    {"auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt", "tensorflow"}
)


def _not_array(value: Any) -> NotImplementedError:
    return NotImplementedError(f"Got {type(value)}, but numpy array or torch tensor are expected.")


def array(value: Any) -> np.ndarray:
    """*value* (tensor, array, NumPy or Python number, list) as an array; torch's error else."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)) or np.isscalar(value):
        return np.asarray(value)
    if callable(getattr(value, "detach", None)) or hasattr(value, "__array__"):
        return convert.to_numpy(value)
    raise _not_array(value)


def tag(value: Any) -> str:
    """A tag: a string (both writers fail on anything else when they build the summary)."""
    if isinstance(value, str):
        return value
    raise TypeError(f"a tag is a string, not {type(value).__name__}")


def scalar(value: Any) -> float:
    """One number from a Python or NumPy number, a numeric string, or a one-element tensor.

    Raises:
        NotImplementedError: not a number, an array or a tensor (torch's ``make_np``).
        ValueError: a string that is not a number.
        AssertionError: an array or tensor of more than one element.
    """
    if isinstance(value, (numbers.Real, str)) and not isinstance(value, np.ndarray):
        return float(value)  # ValueError for "abc", as torch's float(np.array("abc"))
    data = array(value).squeeze()
    if data.ndim != 0:
        raise AssertionError(
            "Tensor should contain one element (0 dimensions). "
            f"Was given size: {data.size} and {data.ndim} dimensions."
        )
    return float(data)


def histogram_values(values: Any) -> np.ndarray:
    """The values of a histogram, flattened, as float64.

    Raises:
        ValueError: no values (``The input has no element.``), or values that are not numbers.
    """
    data = array(values)
    if data.size == 0:
        raise ValueError("The input has no element.")
    return data.astype(np.float64).reshape(-1)


def bins(value: Any) -> Any:
    """*value* if ``numpy.histogram`` (or TensorBoard's ``"tensorflow"``) accepts it as bins."""
    if isinstance(value, str):
        if value not in _BIN_ESTIMATORS:
            raise ValueError(f"{value!r} is not a valid estimator for `bins`")
    elif isinstance(value, numbers.Integral) and value < 1:
        raise ValueError("`bins` must be positive, when an integer")
    return value


def histogram_raw(limits: Any, counts: Any) -> None:
    """Refuse bucket limits and counts of different lengths, as torch does."""
    if len(limits) != len(counts):
        raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")


def image(value: Any, dataformats: str) -> np.ndarray:
    """An image (or a batch) whose axes match *dataformats*, as torch's ``convert_to_HWC`` checks.

    Raises:
        AssertionError: a letter repeated in *dataformats*, or a shape of another rank.
        TypeError: more than four channels (Pillow cannot encode them).
        ZeroDivisionError: a batch of no images (torch's grid divides by its size).
    """
    if isinstance(value, str):
        value = [value]  # torch's make_np: a string is a one-element array
    data = array(value)
    fmt = dataformats.upper()
    if len(set(fmt)) != len(fmt):
        raise AssertionError(
            f"You can not use the same dimension shorthand twice. input_format: {dataformats}"
        )
    if data.ndim != len(fmt):
        raise AssertionError(
            "size of input tensor and input format are different. "
            f"tensor shape: {data.shape}, input_format: {dataformats}"
        )
    if "N" in fmt and data.shape[fmt.index("N")] == 0:
        raise ZeroDivisionError("float division by zero")
    if "C" in fmt and data.shape[fmt.index("C")] > 4:
        raise TypeError(f"Cannot handle this data type: (1, 1, {data.shape[fmt.index('C')]}), |u1")
    if data.dtype.kind not in "biuf":
        data = data.astype(np.float32)  # a string's ValueError, as torch's astype
    return data


def image_batch(value: Any, dataformats: str) -> tuple[np.ndarray, str]:
    """A batch of images: a list of images is stacked (tensorboardX's ``add_images``)."""
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
        data = np.stack([array(v) for v in value])
        if "N" not in dataformats.upper():
            dataformats = "N" + dataformats
        return image(data, dataformats), dataformats
    return image(value, dataformats), dataformats


def video_axes(value: Any, dataformats: str) -> np.ndarray:
    """A video whose five axes *dataformats* names, as ``(N, T, C, H, W)`` (tensorboardX's).

    Raises:
        AssertionError: *dataformats* is not five distinct letters, or the rank differs.
    """
    data = array(value)
    if len(dataformats) != 5:
        raise AssertionError("Only 5D tensor is supported.")
    fmt = dataformats.upper()
    if len(set(fmt)) != len(fmt):
        raise AssertionError(
            f"You can not use the same dimension shorthand twice. input_format: {dataformats}"
        )
    if data.ndim != 5:
        raise AssertionError(
            "size of input tensor and input format are different. "
            f"tensor shape: {data.shape}, input_format: {dataformats}"
        )
    return data.transpose([fmt.find(c) for c in "NTCHW"])  # numpy's error for other letters


def text(value: Any) -> str:
    """Text to log: a string (torch's writer calls ``.encode`` on it)."""
    if isinstance(value, str):
        return value
    raise AttributeError(f"'{type(value).__name__}' object has no attribute 'encode'")


def figure(value: Any) -> None:
    """Refuse a figure (or a list of them) without a canvas, as ``add_figure`` fails on it."""
    for fig in value if isinstance(value, (list, tuple)) else [value]:
        if not hasattr(fig, "canvas"):
            raise AttributeError(f"'{type(fig).__name__}' object has no attribute 'canvas'")


def hparams(
    hparam_dict: Any, metric_dict: Any, domains: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, float]]:
    """The hyper-parameters (None values left out, as torch does) and the metrics as floats.

    Raises:
        TypeError: either is not a dict, or a discrete domain does not fit its hyper-parameter.
        ValueError: a metric that is not a number.
    """
    if type(hparam_dict) is not dict or type(metric_dict) is not dict:
        raise TypeError("hparam_dict and metric_dict should be dictionary.")
    domains = domains or {}
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing logged.")
    for key, values in domains.items():
        if (
            key not in hparam_dict
            or not isinstance(values, list)
            or not all(isinstance(d, type(hparam_dict[key])) for d in values)
        ):
            raise TypeError(
                f"parameter: hparam_domain_discrete[{key}] should be a list of same type as "
                f"hparam_dict[{key}]."
            )
    values = {str(k): hparam_value(v) for k, v in hparam_dict.items() if v is not None}
    metrics = {str(k): scalar(v) for k, v in metric_dict.items()}
    return values, metrics


def hparam_value(value: Any) -> Any:
    """A hyper-parameter as stored: bool, number or string (a tensor gives its first number)."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if callable(getattr(value, "detach", None)) or isinstance(value, (np.ndarray, np.generic)):
        return array(value).reshape(-1)[0].item()
    return str(value)  # tensorboardX takes any value and shows its text


__all__ = [
    "array",
    "bins",
    "figure",
    "histogram_raw",
    "histogram_values",
    "hparam_value",
    "hparams",
    "image",
    "image_batch",
    "scalar",
    "tag",
    "text",
    "video_axes",
]
