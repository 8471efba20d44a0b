"""torch's process-wide settings that change results: keyed with every memoised call.

Registered into memostore's settings (``memostore.effects.process``) when this
package is loaded. A setting at its default (a fresh process's value) is left
out of the call key, so keys of code that changes none of them are as before.

Every call reads them all, so each is read through torch's C getter where
there is one (the public attributes of ``torch.backends`` cost a few
microseconds each); a getter this torch lacks is simply not registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .dtypes import dtype_name

_C = torch._C
_dtype_names: dict[torch.dtype, str] = {}


def _default_dtype() -> str:
    dtype = torch.get_default_dtype()
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = dtype_name(dtype)
    return name


try:
    from torch.utils._device import DeviceContext
except ImportError:  # another torch: its public getter (slower) answers
    DeviceContext = None  # type: ignore[assignment,misc]


def _default_device() -> str:
    # torch.set_default_device and ``with torch.device(...)`` push a mode: none, no cost.
    depth = _C._len_torch_function_stack()
    if depth == 0:
        return "cpu"
    if DeviceContext is None:
        return str(torch.get_default_device())
    for i in range(depth - 1, -1, -1):
        mode = _C._get_function_stack_at(i)
        if isinstance(mode, DeviceContext):
            return str(mode.device)
    return "cpu"


def _autocast(device: str) -> Callable[[], Any]:
    # ``torch.autocast`` (and ``torch.amp``) for *device*: off (None, a fresh process's
    # state) or the dtype ops are cast to; the same call inside bf16 autocast computes
    # another result.
    def read() -> Any:
        if not torch.is_autocast_enabled(device):
            return None
        dtype = torch.get_autocast_dtype(device)
        return _dtype_names.get(dtype) or dtype_name(dtype)

    return read


def _flag(getter: Callable[[], Any]) -> Callable[[], Any]:
    def read() -> Any:
        value = getter()
        # Some getters answer a pair (the setting and whether it may be split).
        return [bool(v) for v in value] if isinstance(value, tuple) else bool(value)

    return read


def register_settings(register: Callable[[str, Callable[[], Any], Any], None]) -> None:
    """Register each setting, its reader and its default with *register*."""
    register("torch.default_dtype", _default_dtype, "float32")
    register("torch.default_device", _default_device, "cpu")
    register("torch.float32_matmul_precision", torch.get_float32_matmul_precision, "highest")
    # Whether results carry autograd graphs: a result made under no_grad is not what a
    # call with gradients on would return (one with a graph is never stored).
    register("torch.grad_enabled", torch.is_grad_enabled, True)
    register("torch.inference_mode", torch.is_inference_mode_enabled, False)
    for device in ("cpu", "cuda"):
        register(f"torch.autocast.{device}", _autocast(device), None)
    getters = {
        "torch.deterministic_algorithms": ("_get_deterministic_algorithms", False),
        "torch.backends.cudnn.enabled": ("_get_cudnn_enabled", True),
        "torch.backends.cudnn.deterministic": ("_get_cudnn_deterministic", False),
        "torch.backends.cudnn.benchmark": ("_get_cudnn_benchmark", False),
        "torch.backends.cudnn.allow_tf32": ("_get_cudnn_allow_tf32", True),
        "torch.backends.cuda.matmul.allow_tf32": ("_get_cublas_allow_tf32", False),
        "torch.backends.cuda.matmul.allow_fp16_accumulation": (
            "_get_cublas_allow_fp16_accumulation",
            False,
        ),
    }
    for name, (getter, default) in getters.items():
        found = getattr(_C, getter, None)
        if found is not None:
            register(name, _flag(found), default)
    for precision in ("fp16", "bf16"):
        found = getattr(_C, f"_get_cublas_allow_{precision}_reduced_precision_reduction", None)
        if found is not None:
            value = _flag(found)()
            default = [True, True] if isinstance(value, list) else True
            name = f"torch.backends.cuda.matmul.allow_{precision}_reduced_precision_reduction"
            register(name, _flag(found), default)
