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

from .codecs import Codec, register_codec


class NdarrayCodec(Codec):
    tag = "ndarray"
    type_names = ("numpy.ndarray",)

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
            out = np.empty(len(node["items"]), dtype=object)
            for i, item in enumerate(node["items"]):
                out[i] = dec.node(item)
            return out.reshape(shape)
        descr = node["descr"]
        dtype = np.lib.format.descr_to_dtype(descr if isinstance(descr, str) else _tuples(descr))
        buf = dec.objects.get_bytearray(node["blob"])
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "ndarray", "descr": node["descr"], "shape": node["shape"]}


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
    return memoryview(data).cast("B") if data.size else memoryview(b"")


def _tuples(descr: Any) -> Any:
    # JSON turned the descr's tuples into lists; numpy wants them back.
    if isinstance(descr, list):
        return [
            tuple(_tuples(x) for x in item) if isinstance(item, list) else item for item in descr
        ]
    return descr


register_codec(NdarrayCodec())
