"""Names of torch dtypes in stored nodes, and how each is laid out in a safetensors blob.

``torch.dtype`` and ``torch.memory_format`` values themselves are stored by name
(codecs ``torch.dtype`` and ``torch.memory_format``).

A node names a dtype by its torch name without the ``torch.`` prefix
(``"bfloat16"``), which is stable across torch versions. The blob of a tensor is
a safetensors file; safetensors has a code for most dtypes. Complex dtypes
without a code (``complex128``, ``complex32``) are written as their real and
imaginary parts, a trailing dimension of 2 (``F64``/``F16``), with the torch
dtype recorded in the file's ``__metadata__``.

A tensor is stored and restored only with a dtype of :data:`TENSOR_DTYPES`,
those a blob restores completely (:func:`tensor_dtype`, the one check). A
quantized tensor's scale and zero point are not its bytes, and torch's
bit-packed shell dtypes (``uint1``..``uint7``, ``bits8``, ``float4_e2m1fn_x2``)
support next to no operation: a stored tensor that names one is a miss, never a
tensor whose next operation trips an internal assertion of torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from memostore.errors import DecodeError, EncodeError
from memostore.values.codecs import Codec

from .summaries import summarize

# torch dtype -> safetensors dtype code, for dtypes laid out as they are.
_NATIVE_NAMES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "complex64": "C64",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
}
# Complex dtypes without a code: stored as pairs of this real code.
_COMPLEX_AS_PAIRS = {"complex128": "F64", "complex32": "F16"}


@dataclass(frozen=True)
class BlobLayout:
    """How one tensor's bytes are described in its safetensors header.

    Attributes:
        code: the safetensors dtype code.
        shape: the shape written in the header.
        metadata: ``__metadata__`` entries (empty when the layout is the tensor's own).
    """

    code: str
    shape: tuple[int, ...]
    metadata: tuple[tuple[str, str], ...] = ()


def dtype_name(dtype: torch.dtype) -> str:
    """The stored name of *dtype* (``torch.float32`` -> ``"float32"``)."""
    return str(dtype).removeprefix("torch.")


# Every dtype of this torch by its stored name (aliases such as "float" included).
_DTYPES = {name: d for name, d in vars(torch).items() if isinstance(d, torch.dtype)}
_DTYPES.update({dtype_name(d): d for d in list(_DTYPES.values())})
_MEMORY_FORMATS = {name: f for name, f in vars(torch).items() if isinstance(f, torch.memory_format)}


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype a stored name denotes; ValueError when this torch lacks it.

    Looked up in this torch's dtypes, never as an attribute of the torch module:
    a stored name is data, and ``torch``'s module ``__getattr__`` imports
    submodules by name (``"_dynamo"``).
    """
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise ValueError(
            f"this torch ({torch.__version__}) has no dtype {name!r}; "
            "restore the value with the torch version that stored it"
        )
    return dtype


# The dtypes a stored tensor may have (of this torch), by stored name.
TENSOR_DTYPES = {n: d for n, d in _DTYPES.items() if n in _NATIVE_NAMES or n in _COMPLEX_AS_PAIRS}


def tensor_dtype(name: Any) -> torch.dtype:
    """The dtype a stored tensor names, if a blob restores tensors of it completely.

    Raises:
        DecodeError: a dtype of :data:`TENSOR_DTYPES` this torch lacks, or any other
            name (a quantized or bit-packed dtype, which is never stored).
    """
    dtype = TENSOR_DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        ours = name in _NATIVE_NAMES or name in _COMPLEX_AS_PAIRS
        raise DecodeError(
            f"a stored tensor has dtype {str(name)[:40]!r}, which is not restored "
            f"({_restored_text()})"
            + ("; restore the value with the torch version that stored it" if ours else "")
        )
    return dtype


def check_tensor_dtype(dtype: torch.dtype) -> None:
    """Refuse to store a tensor of a dtype :func:`tensor_dtype` would not restore."""
    if dtype_name(dtype) not in TENSOR_DTYPES:
        fix = (
            "store t.dequantize(), or t.int_repr() with its scale and zero point"
            if dtype_name(dtype).startswith(("qint", "quint"))
            else "store t.view(torch.uint8) and view it back after a hit"
        )
        raise EncodeError(f"tensors of dtype {dtype} are not stored ({_restored_text()}); {fix}")


def _restored_text() -> str:
    return "tensors are restored with the dtypes " + ", ".join(sorted(TENSOR_DTYPES))


def layout_for(dtype: torch.dtype, shape: tuple[int, ...], nbytes: int) -> BlobLayout:
    """The header description of a tensor of *dtype* (of :data:`TENSOR_DTYPES`) and *shape*."""
    name = dtype_name(dtype)
    code = _NATIVE_NAMES.get(name)
    if code is not None:
        return BlobLayout(code, shape)
    meta = (("torch.dtype", name), ("torch.shape", _shape_text(shape)))
    return BlobLayout(_COMPLEX_AS_PAIRS[name], (*shape, 2), meta)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(n) for n in shape) + "]"


class DtypeCodec(Codec):
    """``torch.dtype`` values (``dtype=torch.float16`` as an argument), by name."""

    tag = "torch.dtype"
    identity_leaf = True
    types = (torch.dtype,)

    def encode(self, dtype: torch.dtype, enc: Any) -> dict[str, Any]:
        return {"name": dtype_name(dtype)}

    def decode(self, node: dict[str, Any], dec: Any) -> torch.dtype:
        return dtype_from_name(node["name"])

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}


class MemoryFormatCodec(Codec):
    """``torch.memory_format`` values (``torch.channels_last``), by name."""

    tag = "torch.memory_format"
    identity_leaf = True
    types = (torch.memory_format,)

    def encode(self, fmt: torch.memory_format, enc: Any) -> dict[str, Any]:
        return {"name": str(fmt).removeprefix("torch.")}

    def decode(self, node: dict[str, Any], dec: Any) -> torch.memory_format:
        # A fixed table, never getattr(torch, name): that would import by stored name.
        name = node["name"]
        fmt = _MEMORY_FORMATS.get(name) if isinstance(name, str) else None
        if fmt is None:
            raise DecodeError(f"this torch has no memory format {node['name']!r}")
        return fmt

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}
