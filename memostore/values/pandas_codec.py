"""pandas ``DataFrame`` and ``Series`` as data: an Arrow IPC stream, never pickle.

Registered by type name, so importing memostore never imports pandas or pyarrow.

A frame is converted with ``pyarrow.Table.from_pandas(preserve_index=True)``,
whose schema carries pandas' own metadata (index levels and names, column
labels and their type, dtypes: categoricals with their categories and order,
time zones, nullable and Arrow-backed dtypes), and stored as one blob holding
the IPC stream: its digest keys an argument by content, and restoring is
``to_pandas()``, which reads data and runs no code a value names. A Series is
stored as a one-column frame, its name beside it; ``attrs`` are stored as a
value of their own.

Arrow does not carry everything a frame can hold: object-dtype columns come
back as other dtypes (a column of Python ints as ``int64``, lists as arrays),
mixed-type column labels as strings, a ``DatetimeIndex`` without its ``freq``.
Before a frame is stored through Arrow, its first row is converted both ways
and must come back equal (labels, index, dtypes), and no column or index level
may have the object dtype. A frame that fails (and a subclass of DataFrame or
Series, which carries more than its data) is encoded as pickling sees it, as
before: it keys by content all the same, and restores only where the user
allowed pandas' reconstructors (``memostore.add_safe_globals``).
"""

from __future__ import annotations

from typing import Any

from ..errors import MalformedObject
from .codecs import Codec, register_codec
from .hf_datasets import arrow_stream

# The column a Series is stored under (its own name is stored beside the table).
_SERIES_COLUMN = "values"


def _arrow_ready(frame: Any) -> bool:
    """Whether *frame* comes back from Arrow as it is: see the module docstring."""
    import pandas as pd

    levels = [frame.index.get_level_values(i) for i in range(frame.index.nlevels)]
    if any(str(dtype) == "object" for dtype in (*frame.dtypes, *(lv.dtype for lv in levels))):
        return False
    try:
        # One row, not none: Arrow keeps an empty categorical's categories only with a chunk.
        head = frame.iloc[:1]
        pd.testing.assert_frame_equal(head, _from_stream(_to_stream(head)), check_exact=True)
    except (AssertionError, ValueError, TypeError, ImportError, NotImplementedError):
        return False
    except Exception as exc:  # pyarrow's own errors (ArrowInvalid, ...): not carried
        if type(exc).__module__.startswith("pyarrow"):
            return False
        raise
    return True


def _to_stream(frame: Any) -> Any:
    import pyarrow as pa

    return arrow_stream(pa.Table.from_pandas(frame, preserve_index=True))


def _from_stream(data: Any) -> Any:
    import pyarrow as pa

    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all().to_pandas()


class _ArrowCodec(Codec):
    """What frames and Series share: the Arrow blob, ``attrs``, the fallback."""

    identity_leaf = True

    def frame_of(self, obj: Any) -> Any:
        raise NotImplementedError

    def encode(self, obj: Any, enc: Any) -> dict[str, Any]:
        cls = type(obj)
        exact = f"{cls.__module__}.{cls.__qualname__}" in self.type_names  # not a subclass
        frame = self.frame_of(obj) if exact else None
        if frame is None or not _arrow_ready(frame):
            return {"pickled": enc.node_by_reduce(obj)}
        stream = [_to_stream(frame)]
        size = stream[0].size

        def produce() -> tuple[Any]:
            # The stream made here is hashed and dropped; storing makes it again.
            return (stream.pop() if stream else _to_stream(frame),)

        out = {"arrow": enc.blob(produce, size, packable=True), "bytes": size}
        out.update(self.extra(obj, enc))
        out["attrs"] = enc.node(dict(obj.attrs)) if obj.attrs else None
        return out

    def extra(self, obj: Any, enc: Any) -> dict[str, Any]:
        return {}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        if "pickled" in node:
            return dec.node(node["pickled"])
        blob = node.get("arrow")
        if not isinstance(blob, str):
            raise MalformedObject("a stored pandas value names no Arrow blob")
        obj = self.rebuild(_from_stream(dec.blob_bytes(blob)), node, dec)
        attrs = dec.node(node["attrs"]) if node.get("attrs") is not None else None
        if attrs is not None:
            if type(attrs) is not dict:
                raise MalformedObject("the stored attrs of a pandas value are not a dict")
            obj.attrs = attrs
        return obj

    def rebuild(self, frame: Any, node: dict[str, Any], dec: Any) -> Any:
        raise NotImplementedError

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": self.tag, "bytes": node.get("bytes")}


class DataFrameCodec(_ArrowCodec):
    tag = "pandas.frame"
    type_names = ("pandas.DataFrame", "pandas.core.frame.DataFrame")

    def frame_of(self, obj: Any) -> Any:
        return obj

    def rebuild(self, frame: Any, node: dict[str, Any], dec: Any) -> Any:
        return frame


class SeriesCodec(_ArrowCodec):
    tag = "pandas.series"
    type_names = ("pandas.Series", "pandas.core.series.Series")

    def frame_of(self, obj: Any) -> Any:
        return obj.to_frame(_SERIES_COLUMN)

    def extra(self, obj: Any, enc: Any) -> dict[str, Any]:
        return {"name": enc.node(obj.name)}

    def rebuild(self, frame: Any, node: dict[str, Any], dec: Any) -> Any:
        if list(frame.columns) != [_SERIES_COLUMN]:
            raise MalformedObject("a stored Series is not a one-column table")
        series = frame[_SERIES_COLUMN]
        series.name = dec.node(node["name"])
        return series


register_codec(DataFrameCodec())
register_codec(SeriesCodec())
