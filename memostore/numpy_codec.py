"""numpy arrays as values: dtype, shape and C-order bytes (never pickle bytes).

Registered by type name, so importing memostore does not import numpy.
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
        data = np.ascontiguousarray(arr)
        view = memoryview(data).cast("B") if data.size else memoryview(b"")
        blob = enc.blob(lambda: (view,), view.nbytes)
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


def _tuples(descr: Any) -> Any:
    # JSON turned the descr's tuples into lists; numpy wants them back.
    if isinstance(descr, list):
        return [
            tuple(_tuples(x) for x in item) if isinstance(item, list) else item for item in descr
        ]
    return descr


register_codec(NdarrayCodec())
