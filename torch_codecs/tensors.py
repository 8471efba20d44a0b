"""Tensors and ``nn.Parameter``: a node with dtype, shape and device, bytes in a blob.

Node (tag ``torch.tensor``)::

    dtype, shape, device, requires_grad, nbytes
    kind       "param" for nn.Parameter; absent for a plain tensor
    cls        code ref of any other tensor subclass
    state      the tensor's __dict__ (attributes set on it), when not empty
    layout     absent for strided tensors; "sparse_coo", "sparse_csr", ... otherwise
    data       {"blob": id}                  the tensor's own bytes (by value)
               {"blob": id, "k": n}          ... which later tensors view (anchor n)
               {"base": {"k", "blob", "dtype", "shape"}, "offset", "stride"}
                                             a view into anchor n's storage
               null                          a meta tensor (no data)

A tensor is stored by value (its digest depends on dtype, shape and bytes,
never on its memory layout). Within one document, a later tensor whose bytes
lie inside the storage of an earlier *contiguous* tensor is stored as a view of
it, so ``(t, t[:10])`` restores with shared storage as ``torch.save`` does; an
earlier tensor that lies inside a later contiguous one is turned into a view
of the later one (its own blob then stays in the store, unused). Views whose
storage no stored contiguous tensor covers (two slices of a tensor that is not
itself stored) restore as independent copies.
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.errors import (
    EncodeError,
    GradientGraphError,
    MalformedObject,
    warn,
)
from memostore.values.codecs import Codec
from memostore.values.hashcache import digest_cache

from .blobs import data_nbytes, read_tensor, tensor_producer
from .dtypes import check_tensor_dtype, dtype_from_name, dtype_name, tensor_dtype
from .fingerprints import leaf_grad, tensor_data_state
from .replay import assign_tensor, tensor_memory, tensor_unchanged, tensor_view
from .summaries import summarize

_SCRATCH_GROUPS = "torch.storage_groups"
_SCRATCH_ANCHORS = "torch.anchor_count"
_SESSION_WARNED = "torch.device_warned"

_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}
# Stored layout names (never looked up on the torch module: a name is data).
_LAYOUTS = {str(layout).removeprefix("torch."): layout for layout in _COMPRESSED}


class _Member:
    """A tensor already encoded in this document, with the byte range it covers."""

    __slots__ = ("data", "dtype", "end", "itemsize", "k", "shape", "start", "stride", "tensor")

    def __init__(self, t: torch.Tensor, data: dict[str, Any], start: int, end: int) -> None:
        self.tensor = t  # kept alive so its storage address cannot be reused meanwhile
        self.data = data
        self.start = start
        self.end = end
        self.itemsize = t.element_size()
        self.dtype = dtype_name(t.dtype)
        self.shape = list(t.shape)
        self.stride = list(t.stride())
        self.k: int | None = None


class _StorageGroup:
    """Tensors of one document sharing one storage: anchors (contiguous) and views."""

    def __init__(self) -> None:
        self.anchors: list[_Member] = []
        self.views: list[tuple[_Member, _Member]] = []  # (view, its anchor)

    def covering(self, start: int, end: int, itemsize: int) -> _Member | None:
        for anchor in self.anchors:
            if (
                anchor.start <= start
                and end <= anchor.end
                and (start - anchor.start) % itemsize == 0
            ):
                return anchor
        return None


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    itemsize = t.element_size()
    start = t.storage_offset() * itemsize
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return start, start + (last + 1) * itemsize


def _view_data(view: _Member, anchor: _Member, enc: Any) -> dict[str, Any]:
    if anchor.k is None:
        anchor.k = enc.scratch.get(_SCRATCH_ANCHORS, 0)
        enc.scratch[_SCRATCH_ANCHORS] = anchor.k + 1
        anchor.data["k"] = anchor.k
    base = {
        "k": anchor.k,
        "blob": anchor.data["blob"],
        "dtype": anchor.dtype,
        "shape": anchor.shape,
    }
    return {
        "base": base,
        "offset": (view.start - anchor.start) // view.itemsize,
        "stride": view.stride,
    }


def _set_data(member: _Member, data: dict[str, Any]) -> None:
    member.data.clear()
    member.data.update(data)


class TensorCodec(Codec):
    """``torch.Tensor`` and its subclasses (``nn.Parameter`` foremost)."""

    tag = "torch.tensor"
    types = (torch.Tensor,)
    identity_leaf = True

    # -- encoding ----------------------------------------------------------------------
    def encode(self, t: torch.Tensor, enc: Any) -> dict[str, Any]:
        if t.is_quantized:
            return _encode_quantized(t, enc)
        _check_supported(t)
        if enc.verify and t.grad_fn is not None:
            # Storing (not keying): a restored tensor has no graph, so a hit could
            # not give back what the body returned.
            raise GradientGraphError(
                f"a {t.dtype} tensor of shape {list(t.shape)} attached to an autograd "
                f"graph (grad_fn={type(t.grad_fn).__name__})"
            )
        cls = type(t)
        node: dict[str, Any] = {
            "dtype": dtype_name(t.dtype),
            "shape": list(t.shape),
            "device": str(t.device),
            "requires_grad": t.requires_grad,
        }
        if cls is torch.nn.Parameter:
            node["kind"] = "param"
        elif cls is not torch.Tensor:
            node["cls"] = enc.code(cls)
        if t.layout == torch.strided:
            node["nbytes"] = data_nbytes(t)
            node["data"] = None if t.is_meta else self._data(t, enc)
        else:
            node.update(_encode_sparse(t, enc))
        state = t.__dict__ if cls is not torch.Tensor else None
        if state:
            node["state"] = enc.node(dict(state))
        grad = leaf_grad(t)
        if grad is not None:
            node["grad"] = enc.node(grad)
        return node

    def _data(self, t: torch.Tensor, enc: Any) -> dict[str, Any]:
        plain = not (t.is_conj() or t.is_neg())
        shareable = plain and t.numel() > 0 and t.untyped_storage().nbytes() > 0
        if not shareable:
            return {"blob": _blob(t, enc)}
        groups = enc.scratch.setdefault(_SCRATCH_GROUPS, {})
        key = (str(t.device), t.untyped_storage().data_ptr())
        group = groups.get(key)
        start, end = _byte_range(t)
        if group is not None:
            anchor = group.covering(start, end, t.element_size())
            if anchor is not None:
                view = _Member(t, {}, start, end)
                view.data.update(_view_data(view, anchor, enc))
                group.views.append((view, anchor))
                return view.data
        data = {"blob": _blob(t, enc)}
        if t.is_contiguous():
            if group is None:
                group = groups[key] = _StorageGroup()
            self._absorb(group, _Member(t, data, start, end), enc)
        return data

    def _absorb(self, group: _StorageGroup, anchor: _Member, enc: Any) -> None:
        """Make *anchor* a new anchor; turn the members inside it into its views."""
        inside = [
            m
            for m in group.anchors
            if anchor.start <= m.start
            and m.end <= anchor.end
            and (m.start - anchor.start) % m.itemsize == 0
        ]
        moved = [v for v, a in group.views if a in inside]
        if any((v.start - anchor.start) % v.itemsize for v in moved):
            inside, moved = [], []
        group.anchors = [a for a in group.anchors if a not in inside]
        group.anchors.append(anchor)
        group.views = [(v, a) for v, a in group.views if a not in inside]
        for member in [*inside, *moved]:
            _set_data(member, _view_data(member, anchor, enc))
            member.k = None
            group.views.append((member, anchor))

    # -- decoding ------------------------------------------------------------------------
    def decode(self, node: dict[str, Any], dec: Any) -> torch.Tensor:
        if "quantized" in node:
            return _decode_quantized(node["quantized"], dec)
        cls = dec.code(node["cls"]) if "cls" in node else None
        dtype = tensor_dtype(node["dtype"])
        device = target_device(node["device"], dec)
        if "layout" in node:
            t = _decode_sparse(node, dec, dtype, device)
        else:
            t = _decode_strided(node, dec, dtype, device)
        requires_grad = bool(node.get("requires_grad"))
        if node.get("kind") == "param":
            t = torch.nn.Parameter(t, requires_grad=requires_grad)
        elif cls is not None:
            if not issubclass(cls, torch.Tensor):
                raise MalformedObject(f"a stored tensor names {cls!r} as its class")
            if issubclass(cls, torch.nn.Parameter):
                t = torch.Tensor._make_subclass(cls, t, requires_grad)
            else:
                t = t.as_subclass(cls)
                if requires_grad:
                    t.requires_grad_(True)
        elif requires_grad:
            t.requires_grad_(True)
        if "state" in node:
            t.__dict__.update(dec.node(node["state"]))
        if "grad" in node:
            t.grad = dec.node(node["grad"])  # torch checks its type, shape and device
        blob = (node.get("data") or {}).get("blob")
        if blob is not None and "base" not in node["data"]:
            state = tensor_data_state(t)
            if state is not None:
                # Read back under its id, its bytes proven (see checks.py): no need
                # to hash it again.
                digest_cache.put(t, state, blob)
        return t

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}

    def unchanged(self, target: torch.Tensor, source: torch.Tensor) -> bool:
        return tensor_unchanged(target, source)

    def assign(self, target: torch.Tensor, source: torch.Tensor, plan: Any) -> bool:
        return assign_tensor(target, source, plan)

    def memory(self, t: torch.Tensor) -> Any:
        return tensor_memory(t)

    def view(self, base: torch.Tensor, base_layout: Any, layout: Any) -> Any:
        return tensor_view(base, base_layout, layout)


def _blob(t: torch.Tensor, enc: Any) -> str:
    produce, size = tensor_producer(t)
    return enc.cached_blob(t, tensor_data_state(t), produce, size, packable=True)


def _encode_quantized(t: torch.Tensor, enc: Any) -> dict[str, Any]:
    """A quantized tensor (a dynamically quantized model's weights): its integers and scales.

    What ``torch.save`` keeps of it too, so equal quantized weights key alike in
    every process; affine schemes only (those ``quantize_dynamic`` and the
    eager-mode flows make).
    """
    scheme = t.qscheme()
    out: dict[str, Any] = {"dtype": dtype_name(t.dtype), "ints": enc.node(t.int_repr())}
    if scheme == torch.per_tensor_affine:
        out.update(scale=float(t.q_scale()), zero_point=int(t.q_zero_point()))
    elif scheme in (torch.per_channel_affine, torch.per_channel_affine_float_qparams):
        out.update(
            scheme=str(scheme).rpartition(".")[2],
            scales=enc.node(t.q_per_channel_scales()),
            zero_points=enc.node(t.q_per_channel_zero_points()),
            axis=int(t.q_per_channel_axis()),
        )
    else:
        raise EncodeError(
            f"quantized tensors of scheme {scheme} are not supported; store t.dequantize(), "
            "or t.int_repr() with its quantization parameters"
        )
    return {"quantized": out}


def _decode_quantized(node: dict[str, Any], dec: Any) -> torch.Tensor:
    ints = dec.node(node["ints"])
    dtype = dtype_from_name(node["dtype"])
    if not isinstance(ints, torch.Tensor) or not dtype.is_quantized:
        raise MalformedObject("a stored quantized tensor is not integers of a quantized dtype")
    if "scale" in node:
        t = torch._make_per_tensor_quantized_tensor(ints, node["scale"], node["zero_point"])
    else:
        scales, zero_points = dec.node(node["scales"]), dec.node(node["zero_points"])
        t = torch._make_per_channel_quantized_tensor(ints, scales, zero_points, node["axis"])
    if t.dtype != dtype:
        raise MalformedObject(f"a stored quantized tensor of {dtype} holds {ints.dtype} integers")
    return t


def _check_supported(t: torch.Tensor) -> None:
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        raise EncodeError(
            "an uninitialized lazy parameter has no shape or data yet; run one forward "
            "pass through the lazy module before storing or hashing it"
        )
    check_tensor_dtype(t.dtype)
    if t.is_nested:
        raise EncodeError("nested tensors are not supported; store t.unbind() instead")
    if t.layout != torch.strided and t.layout != torch.sparse_coo and t.layout not in _COMPRESSED:
        raise EncodeError(f"tensors of layout {t.layout} are not supported; store t.to_dense()")


def _encode_sparse(t: torch.Tensor, enc: Any) -> dict[str, Any]:
    t = t.detach()
    if t.layout == torch.sparse_coo:
        return {
            "layout": "sparse_coo",
            "coalesced": t.is_coalesced(),
            "indices": enc.node(t._indices()),
            "values": enc.node(t._values()),
        }
    compressed, plain = _COMPRESSED[t.layout]
    return {
        "layout": str(t.layout).removeprefix("torch."),
        "compressed": enc.node(getattr(t, compressed)()),
        "plain": enc.node(getattr(t, plain)()),
        "values": enc.node(t.values()),
    }


def _decode_sparse(
    node: dict[str, Any], dec: Any, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    shape = node["shape"]
    if node["layout"] == "sparse_coo":
        indices = dec.node(node["indices"])
        values = dec.node(node["values"])
        # check_invariants: indices inside the shape, and a "coalesced" claim true (an
        # index past the end would make to_dense() write out of bounds).
        return torch.sparse_coo_tensor(
            indices,
            values,
            shape,
            dtype=dtype,
            device=device,
            is_coalesced=bool(node["coalesced"]),
            check_invariants=True,
        )
    compressed = dec.node(node["compressed"])
    plain = dec.node(node["plain"])
    values = dec.node(node["values"])
    layout = _LAYOUTS.get(node["layout"])
    if layout not in _COMPRESSED:
        raise MalformedObject(f"unknown sparse layout {str(node['layout'])[:40]!r}")
    return torch.sparse_compressed_tensor(
        compressed,
        plain,
        values,
        shape,
        dtype=dtype,
        layout=layout,
        device=device,
        check_invariants=True,
    )


def _decode_strided(
    node: dict[str, Any], dec: Any, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    shape = node["shape"]
    data = node["data"]
    if data is None:
        return torch.empty(shape, dtype=dtype, device="meta")
    if "base" in data:
        base = _anchor(dec, data["base"], device)
        storage = base.untyped_storage()
        _check_view(storage.nbytes(), dtype.itemsize, data["offset"], shape, data["stride"])
        out = torch.empty(0, dtype=dtype, device=base.device)
        return out.set_(storage, data["offset"], shape, data["stride"])
    if "k" in data:
        descr = {"k": data["k"], "blob": data["blob"], "dtype": node["dtype"], "shape": shape}
        return _anchor(dec, descr, device)
    return _to_device(read_tensor(dec, data["blob"], dtype, shape), device)


def _check_view(nbytes: int, itemsize: int, offset: Any, shape: Any, stride: Any) -> None:
    """Refuse a stored view that reaches outside its storage (``set_`` does not check).

    A view is made with ``Tensor.set_``, which takes any offset and strides: a
    crafted one would read and write memory past the storage. Sizes, strides
    and the offset must be non-negative ints, and the last element in bounds.
    """
    dims = (shape, stride)
    if not all(type(d) is list and all(type(n) is int and n >= 0 for n in d) for d in dims):
        raise MalformedObject("a stored view has a malformed shape or stride")
    if len(shape) != len(stride) or type(offset) is not int or offset < 0:
        raise MalformedObject("a stored view has a malformed offset or stride")
    if 0 in shape:
        return
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if (last + 1) * itemsize > nbytes:
        raise MalformedObject(
            f"a stored view reaches byte {(last + 1) * itemsize} of a {nbytes}-byte storage"
        )


def _anchor(dec: Any, descr: dict[str, Any], device: torch.device) -> torch.Tensor:
    """The restored storage anchor *descr* names, read once per document."""
    key = ("torch.anchor", descr["k"])
    found = dec.scratch.get(key)
    if found is None:
        dtype = tensor_dtype(descr["dtype"])
        t = read_tensor(dec, descr["blob"], dtype, descr["shape"])
        found = dec.scratch[key] = _to_device(t, device)
    return found


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if device.type == "cpu" else t.to(device)


_CPU = torch.device("cpu")


def target_device(text: str, dec: Any) -> torch.device:
    """Where a tensor stored on device *text* is restored: there if possible, else the CPU."""
    if text == "cpu":
        return _CPU
    device = torch.device(text)
    if device.type == "meta":
        return device
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if is_available is not None and is_available():
        count_fn = getattr(backend, "device_count", None)
        if device.index is not None and count_fn is not None and device.index >= count_fn():
            return torch.device(device.type)  # fewer devices here: use the current one
        return device
    warned = dec.session.setdefault(_SESSION_WARNED, set())
    if device.type not in warned:
        warned.add(device.type)
        warn(
            f"tensors stored on {text} are restored on the CPU because "
            f"{device.type} is not available here"
        )
    return torch.device("cpu")
