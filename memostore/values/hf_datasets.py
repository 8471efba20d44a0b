"""Hugging Face ``datasets``: a ``Dataset`` keyed, stored and restored by its content.

Registered by type name, so importing memostore never imports ``datasets``.

A ``datasets.Dataset`` is an Arrow table (or several, concatenated), an
optional indices mapping (what ``select``, ``shuffle``, ``filter`` leave),
its ``DatasetInfo`` (features and the rest), its split and its format (what
``set_format``/``set_transform`` chose). All of these are its value; its
location and its ``_fingerprint`` (datasets' hash of how it was made) are not.

* A memory-mapped table (``load_from_disk``, ``map`` cache files) is keyed by
  the content of its Arrow file (stat-guarded, see
  :mod:`memostore.values.file_digests`) and the transforms datasets replays on it.
* An in-memory table is keyed by its Arrow IPC stream: equal rows in other
  chunks key differently (a miss, never a wrong hit).

Stored as a result, every table becomes a blob holding an Arrow stream; a
restore lays each out under the store's ``checkouts/`` as a read-only copy
(a reflink where the file system has them) and memory-maps it, so a restored
dataset costs no RAM for its rows and ``map`` writes its cache files beside
that copy, never into the store. A copy that was edited is laid out again
before it is used (see :mod:`memostore.odb.checkouts`).

Only ``set_format`` (and ``set_transform``, ``reset_format``, which call it)
changes a Dataset in place, so a Dataset's digest is cached while its tables,
info, split and format attributes are the same objects and its files keep
their stat signature; a file written within the racy window of the check is
never trusted (the dataset is hashed again until it is older).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Hashable, Iterator
from dataclasses import asdict
from typing import Any

from ..errors import DecodeError
from ..odb.objects import canonical_json, digest_bytes
from .codecs import Codec, register_codec
from .file_digests import RACY_WINDOW_NS, content_digest
from .snapshot import SnapshotEntry

_READ_CHUNK = 16 << 20
_ARROW_NAME = "data.arrow"


class _Same:
    """Compares equal to another holder of the very same object (never by value)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _table_files(table: Any) -> list[str]:
    from datasets.table import ConcatenationTable, MemoryMappedTable

    if isinstance(table, ConcatenationTable):
        return [path for row in table.blocks for block in row for path in _table_files(block)]
    if isinstance(table, MemoryMappedTable):
        return [table.path]
    return []


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            yield chunk


def arrow_stream(table: Any) -> Any:
    """*table* (a ``pyarrow.Table``) as an Arrow IPC stream (the format datasets maps)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _table_node(table: Any, enc: Any) -> dict[str, Any]:
    from datasets.table import ConcatenationTable, MemoryMappedTable

    if isinstance(table, ConcatenationTable):
        return {
            "t": "concat",
            "schema": enc.node(table.schema.serialize().to_pybytes()),
            "blocks": [[_table_node(block, enc) for block in row] for row in table.blocks],
        }
    if isinstance(table, MemoryMappedTable):
        path = table.path
        try:
            content = content_digest(path)
        except FileNotFoundError:
            content = None  # the file is gone; its rows are still mapped: key those below
        if content is not None and content.kind == "file":
            blob = enc.blob(lambda: _file_chunks(path), content.size, known_id=content.digest)
            return {
                "t": "arrow",
                "blob": blob,
                "bytes": content.size,
                "replays": enc.node(list(table.replays)),
            }
    arrow = table.table
    first = [arrow_stream(arrow)]
    size = first[0].size

    def produce() -> tuple[Any]:
        # The serialisation made here is hashed and dropped; storing makes it again,
        # so no copy of the rows is held while the call runs.
        return (first.pop() if first else arrow_stream(arrow),)

    blob = enc.blob(produce, size)
    return {"t": "arrow", "blob": blob, "bytes": size, "replays": []}


def _arrow_file(objects: Any, blob: Any, size: Any) -> str:
    """A read-only copy of the blob under the store's checkouts, checked before each use
    (laid out again when it was edited; see :mod:`memostore.odb.checkouts`)."""
    if not isinstance(blob, str):
        raise DecodeError(f"malformed Arrow table node: blob {blob!r}")
    key = digest_bytes(b"memostore:arrow:" + blob.encode())
    entry = SnapshotEntry(_ARROW_NAME, blob, size, False)
    from ..odb.checkouts import (
        ensure_checkout,  # imported when a table is restored, not with memostore
    )

    return str(ensure_checkout(objects, key, "Arrow table", _ARROW_NAME, False, (entry,)))


def _table_from(node: dict[str, Any], dec: Any) -> Any:
    import pyarrow as pa
    from datasets.table import ConcatenationTable, MemoryMappedTable

    if node["t"] == "concat":
        blocks = [[_table_from(block, dec) for block in row] for row in node["blocks"]]
        schema = pa.ipc.read_schema(pa.py_buffer(dec.node(node["schema"])))
        table = ConcatenationTable._concat_blocks_horizontally_and_vertically(blocks)
        if not table.schema.equals(schema, check_metadata=True):
            if table.schema.equals(schema):
                table = table.replace_schema_metadata(schema.metadata)
            else:
                table = table.cast(schema)
        return ConcatenationTable(table, blocks)
    if node["t"] != "arrow":
        raise DecodeError(f"unknown Arrow table node {node['t']!r}: upgrade memostore")
    path = _arrow_file(dec.objects, node["blob"], node["bytes"])
    replays = [_replay(r) for r in dec.node(node["replays"])]
    return MemoryMappedTable.from_file(path, replays)


# What datasets' MemoryMappedTable records as replays. datasets calls
# ``getattr(table, name)(*args, **kwargs)`` for each: a stored name is data, so only
# these names, with arguments that hold no code, are handed to it.
_REPLAYS = frozenset(
    {
        "add_column",
        "append_column",
        "cast",
        "combine_chunks",
        "drop",
        "filter",
        "flatten",
        "remove_column",
        "rename_columns",
        "replace_schema_metadata",
        "select",
        "set_column",
        "slice",
    }
)


def _replay(stored: Any) -> tuple[str, Any, Any]:
    """A stored replay (name, args, kwargs), if datasets would have recorded it."""
    if type(stored) not in (list, tuple) or len(stored) != 3:
        raise DecodeError("a stored Arrow table replay is not (name, args, kwargs)")
    name, args, kwargs = stored
    if name not in _REPLAYS or type(args) not in (list, tuple) or type(kwargs) is not dict:
        raise DecodeError(f"a stored Arrow table replays {str(name)[:40]!r}, not a transform")
    if _holds_callable([args, kwargs]):
        raise DecodeError(f"a stored Arrow table replay {name!r} is given code as an argument")
    return name, tuple(args), kwargs


def _holds_callable(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) in (list, tuple, set, frozenset):
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif callable(item):
            return True
    return False


class DatasetCodec(Codec):
    """``datasets.Dataset``: tables, indices, info, split and format (module docstring)."""

    tag = "hf.dataset"
    type_names = ("datasets.arrow_dataset.Dataset",)
    standalone = True

    def encode(self, ds: Any, enc: Any) -> dict[str, Any]:
        indices = ds._indices
        return {
            "rows": ds.num_rows,
            "data": _table_node(ds._data, enc),
            "indices": None if indices is None else _table_node(indices, enc),
            # As datasets writes dataset_info.json: field order kept (features' is the columns').
            "info": json.dumps(asdict(ds._info)),
            "split": None if ds._split is None else str(ds._split),
            "format": {
                "type": ds._format_type,
                "kwargs": enc.node(ds._format_kwargs),
                "columns": enc.node(ds._format_columns),
                "all": bool(ds._output_all_columns),
            },
        }

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from datasets import Dataset, DatasetInfo, NamedSplit

        data = _table_from(node["data"], dec)
        indices = None if node["indices"] is None else _table_from(node["indices"], dec)
        info = DatasetInfo.from_dict(json.loads(node["info"]))
        split = None if node["split"] is None else NamedSplit(node["split"])
        # A fingerprint of the content, so datasets' own caches see equal values alike.
        fingerprint = digest_bytes(canonical_json(node))[:16]
        ds = Dataset(data, info=info, split=split, indices_table=indices, fingerprint=fingerprint)
        if ds._data is not data and ds._data.schema.equals(data.schema, check_metadata=True):
            # Dataset() recorded one more metadata replay on the table; the stored
            # value did not have it, and it would change the restored value's digest.
            ds._data = data
        fmt = node["format"]
        # Set as set_format sets them, without its fingerprint update (already chosen).
        ds._format_type = fmt["type"]
        ds._format_kwargs = dec.node(fmt["kwargs"])
        ds._format_columns = dec.node(fmt["columns"])
        ds._output_all_columns = fmt["all"]
        return ds

    def fingerprint(self, ds: Any) -> Hashable | None:
        # A digest computed now holds while these same objects are in place and the
        # mapped files keep their stat signature (set_format assigns new objects).
        files = _table_files(ds._data)
        if ds._indices is not None:
            files += _table_files(ds._indices)
        now = time.time_ns()
        stats = []
        for path in files:
            try:
                st = os.stat(path)
            except OSError:
                return None
            if max(st.st_mtime_ns, st.st_ctime_ns) >= now - RACY_WINDOW_NS:
                return None  # racy: could change within its timestamp tick, unseen
            stats.append((path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        info = ds._info
        columns = ds._format_columns
        return (
            _Same(ds._data),
            _Same(ds._indices),
            _Same(info),
            tuple(_Same(v) for v in vars(info).values()),
            _Same(ds._split),
            ds._format_type,
            _Same(ds._format_kwargs),
            tuple((k, _Same(v)) for k, v in ds._format_kwargs.items()),
            _Same(columns),
            None if columns is None else tuple(columns),
            ds._output_all_columns,
            tuple(stats),
        )

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "Dataset", "rows": node.get("rows")}
        with contextlib.suppress(ValueError, KeyError, TypeError):
            features = json.loads(node["info"]).get("features") or {}
            out["columns"] = ", ".join(features)
        out["bytes"] = _stored_bytes(node["data"])
        fmt = node.get("format") or {}
        if fmt.get("type"):
            out["format"] = fmt["type"]
        return out


def _stored_bytes(node: dict[str, Any]) -> int:
    if node.get("t") == "concat":
        return sum(_stored_bytes(block) for row in node["blocks"] for block in row)
    return int(node.get("bytes") or 0)


class DatasetDictCodec(Codec):
    """``datasets.DatasetDict``: its splits in order, each a Dataset of its own."""

    tag = "hf.dataset_dict"
    type_names = ("datasets.dataset_dict.DatasetDict",)

    def encode(self, dd: Any, enc: Any) -> dict[str, Any]:
        return {"splits": [[str(name), enc.node(ds)] for name, ds in dd.items()]}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from datasets import DatasetDict

        return DatasetDict({name: dec.node(ds) for name, ds in node["splits"]})

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "DatasetDict", "splits": ", ".join(name for name, _ in node["splits"])}


register_codec(DatasetCodec())
register_codec(DatasetDictCodec())
