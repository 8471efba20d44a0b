"""numpy arrays as values: dtype, shape and C-order bytes (never pickle bytes).

Registered by type name, so importing memostore does not import numpy.

An array's bytes are hashed again on every key, except where they provably
cannot change while the digest is reused: a plain ``ndarray`` none of whose
base chain is writeable and whose memory belongs to an immutable ``bytes``
object (``np.frombuffer(some_bytes)``, read-only views of it, and such arrays
reached through a read-only ``memoryview`` of ``bytes``). Only there is the
digest of its bytes cached, under its data pointer, shape, strides and dtype.
Every other array is re-hashed: an array that owns its memory can be made
writeable again after ``flags.writeable = False``; a view of a ``bytearray``,
an ``mmap`` or another array can change through its base; a ``np.memmap``
can change on disk.
"""

from __future__ import annotations

from typing import Any

from .codecs import Codec, Memory, register_codec


class NdarrayCodec(Codec):
    tag = "ndarray"
    type_names = ("numpy.ndarray",)
    identity_leaf = True

    def encode(self, arr: Any, enc: Any) -> dict[str, Any]:
        import numpy as np

        descr = np.lib.format.dtype_to_descr(arr.dtype)
        shape = list(arr.shape)
        if arr.dtype.hasobject:
            return {"descr": "|O", "shape": shape, "items": [enc.node(x) for x in arr.flat]}
        nbytes = arr.size * arr.dtype.itemsize
        fingerprint = immutable_fingerprint(arr)
        if fingerprint is None:
            view = _c_bytes(arr)
            blob = enc.blob(lambda: (view,), nbytes)
        else:
            # The copy a non-contiguous array needs is made only if the bytes are read.
            blob = enc.cached_blob(arr, fingerprint, lambda: (_c_bytes(arr),), nbytes)
        return {"descr": descr, "shape": shape, "blob": blob}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        import numpy as np

        shape = tuple(node["shape"])
        if "items" in node:
            dec.charge(8 * len(node["items"]), "an object array")
            out = np.empty(len(node["items"]), dtype=object)
            for i, item in enumerate(node["items"]):
                out[i] = dec.node(item)
            return out.reshape(shape)
        descr = node["descr"]
        dtype = np.lib.format.descr_to_dtype(descr if isinstance(descr, str) else _tuples(descr))
        buf = dec.objects.get_bytearray(node["blob"])
        dec.charge(len(buf), "an array", node["blob"], len(buf))
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "ndarray", "descr": node["descr"], "shape": node["shape"]}

    def memory(self, arr: Any) -> Memory | None:
        """The array's bytes within the memory of the array that owns them."""
        import numpy as np

        if type(arr) is not np.ndarray or arr.size == 0 or arr.dtype.hasobject:
            return None
        owner = arr
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        start = arr.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        low = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides, strict=True) if s < 0)
        high = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides, strict=True) if s > 0)
        layout = {
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "strides": list(arr.strides),
            "offset": start,
        }
        return Memory(("numpy", id(owner)), start + low, start + high + arr.itemsize, layout)

    def view(self, base: Any, base_layout: Any, layout: Any) -> Any:
        """The view *layout* describes, over the memory of the caller's array *base* (or None)."""
        import numpy as np

        now = self.memory(base)
        if (
            now is None
            or {k: now.layout[k] for k in ("dtype", "shape", "strides")}
            != {k: base_layout[k] for k in ("dtype", "shape", "strides")}
            or not base.flags.c_contiguous
        ):
            return None
        return np.ndarray(
            tuple(layout["shape"]),
            dtype=np.dtype(layout["dtype"]),
            buffer=base,
            offset=layout["offset"] - base_layout["offset"],
            strides=tuple(layout["strides"]),
        )


def immutable_fingerprint(arr: Any) -> tuple[Any, ...] | None:
    """A fingerprint for *arr* if its bytes provably cannot change, else None.

    See the module docstring for which arrays qualify. The fingerprint holds
    what an array can change about itself without touching its bytes (its data
    pointer, shape, strides, dtype); the bytes behind it are immutable.
    """
    import numpy as np

    if type(arr) is not np.ndarray:
        return None  # subclasses (masked arrays, matrices) carry more than the bytes
    owner: Any = arr
    while isinstance(owner, np.ndarray):
        if owner.flags.writeable:
            return None
        owner = owner.base
    if isinstance(owner, memoryview):
        if not owner.readonly:
            return None
        owner = owner.obj
    if type(owner) is not bytes:
        return None
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype)


def _c_bytes(arr: Any) -> memoryview:
    import numpy as np

    data = np.ascontiguousarray(arr)
    # As bytes through a view: the buffer protocol refuses datetime64 and timedelta64.
    return memoryview(data.reshape(-1).view(np.uint8)) if data.size else memoryview(b"")


def _tuples(descr: Any) -> Any:
    # JSON turned the descr's tuples into lists; numpy wants them back.
    if isinstance(descr, list):
        return [
            tuple(_tuples(x) for x in item) if isinstance(item, list) else item for item in descr
        ]
    return descr


register_codec(NdarrayCodec())
