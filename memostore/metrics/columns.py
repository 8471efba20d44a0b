"""Column chunks: named arrays packed into one blob, compressed losslessly.

A chunk blob (``docs/logging.md`` has the full layout)::

    b"memostore-columns:1\\n"
    u32 little-endian length of the header, then the header: canonical JSON
        {"columns": [{"name", "type", "count", "encoding", "size"}, ...]}
    the columns' encoded bytes, in header order

``type`` is ``i8`` (int64), ``f8`` (float64) or ``json`` (a UTF-8 JSON list).
Numeric columns are encoded as ``raw`` (little-endian), ``shuffle-zlib``
(bytes regrouped by significance, then zlib) or ``delta-shuffle-zlib`` (each
element's 64-bit pattern minus the previous one's, wrapping, first). Both are
exact for every bit pattern, so NaN payloads, signed zeros and infinities
come back unchanged. The encoding is a pure function of the array, so equal
arrays give equal blobs and deterministic re-runs share them.

Decoding trusts no declared size: a chunk may come from a remote whose writer
made it a zlib bomb. A numeric column inflates to at most the ``8 * count``
bytes its declared count needs, counts above ``COUNT_MAX`` are refused, and a
JSON column inflates to at most ``JSON_INFLATE_RATIO`` times its compressed
size (or ``JSON_MIN_LIMIT``); past that, the chunk is malformed.

Nothing in this module performs I/O.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import MalformedObject
from ..odb.objects import canonical_json

MAGIC = b"memostore-columns:1\n"
_ZLIB_LEVEL = 6
# Choosing between plain and delta encoding on a sample keeps sealing to one
# compression pass per column.
_SAMPLE = 4096
_DTYPES = {"i8": np.dtype("<i8"), "f8": np.dtype("<f8")}
# The most points one column of a chunk may declare (sealing writes at most 65,536).
COUNT_MAX = 1 << 22
# How far a JSON column (text, media metadata) may inflate: logged text compresses
# well below this; a zlib bomb inflates about a thousandfold.
JSON_INFLATE_RATIO = 64
JSON_MIN_LIMIT = 64 << 20

Column = np.ndarray | list[Any]


def _shuffle(u: np.ndarray) -> bytes:
    return u.view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(data: bytes, count: int) -> np.ndarray:
    return np.frombuffer(data, np.uint8).reshape(8, count).T.copy().view("<u8").reshape(count)


def _delta(u: np.ndarray) -> np.ndarray:
    d = u.copy()
    d[1:] -= u[:-1]  # uint64 arithmetic wraps, which the inverse cumsum undoes
    return d


def _encode_numeric(array: np.ndarray, kind: str) -> tuple[str, bytes]:
    u = np.ascontiguousarray(array, dtype=_DTYPES[kind]).view("<u8")
    if len(u) == 0:
        return "raw", b""
    if kind == "i8":
        use_delta = True  # steps: nearly always evenly spaced
    else:
        sample = u[:_SAMPLE]
        plain = len(zlib.compress(_shuffle(sample), 1))
        use_delta = len(zlib.compress(_shuffle(_delta(sample)), 1)) < plain
    packed = zlib.compress(_shuffle(_delta(u) if use_delta else u), _ZLIB_LEVEL)
    if len(packed) >= u.nbytes:
        return "raw", u.tobytes()
    return ("delta-shuffle-zlib" if use_delta else "shuffle-zlib"), packed


def _decode_numeric(data: bytes, kind: str, count: int, encoding: str) -> np.ndarray:
    dtype = _DTYPES[kind]
    if encoding == "raw":
        if len(data) != 8 * count:
            raise MalformedObject("column size does not match its count")
        return np.frombuffer(data, dtype).copy()
    raw = inflate(data, 8 * count)
    if len(raw) != 8 * count:
        raise MalformedObject("column size does not match its count")
    u = _unshuffle(raw, count)
    if encoding == "delta-shuffle-zlib":
        u = np.cumsum(u, dtype=np.uint64)
    elif encoding != "shuffle-zlib":
        raise MalformedObject(f"unknown column encoding {encoding!r}")
    return u.view(dtype)


def inflate(data: bytes, limit: int) -> bytes:
    """zlib-decompress *data* to at most *limit* bytes; MalformedObject if it holds more."""
    inflater = zlib.decompressobj()
    raw = inflater.decompress(data, limit)
    if inflater.unconsumed_tail or (not inflater.eof and inflater.decompress(b"", 1)):
        raise MalformedObject(f"a compressed column inflates past the {limit} bytes it may")
    return raw


def encode_columns(columns: Mapping[str, tuple[str, Column]]) -> bytes:
    """Pack columns into one blob.

    Args:
        columns: name -> (type, data), in the order they are stored; type is
            ``i8``, ``f8`` (data: array-like) or ``json`` (data: a JSON-able list).

    Returns:
        The blob's bytes (deterministic for equal input).
    """
    header: list[dict[str, Any]] = []
    bodies: list[bytes] = []
    for name, (kind, data) in columns.items():
        if kind == "json":
            raw = canonical_json(list(data))
            packed = zlib.compress(raw, _ZLIB_LEVEL)
            encoding, body = ("zlib", packed) if len(packed) < len(raw) else ("raw", raw)
            count = len(data)
        else:
            array = np.asarray(data)
            encoding, body = _encode_numeric(array, kind)
            count = len(array)
        header.append(
            {"name": name, "type": kind, "count": count, "encoding": encoding, "size": len(body)}
        )
        bodies.append(body)
    head = canonical_json({"columns": header})
    return b"".join([MAGIC, struct.pack("<I", len(head)), head, *bodies])


def decode_columns(data: bytes) -> dict[str, Column]:
    """Unpack a blob made by :func:`encode_columns`: name -> array (or list for json)."""
    if not data.startswith(MAGIC):
        raise MalformedObject("not a memostore column chunk")
    pos = len(MAGIC)
    try:
        (head_len,) = struct.unpack_from("<I", data, pos)
        pos += 4
        header = json.loads(data[pos : pos + head_len])["columns"]
        pos += head_len
        out: dict[str, Column] = {}
        for col in header:
            body = data[pos : pos + col["size"]]
            pos += col["size"]
            count = col["count"]
            if type(count) is not int or not 0 <= count <= COUNT_MAX:
                raise MalformedObject(f"a column declares {str(count)[:20]} points")
            if col["type"] == "json":
                limit = max(JSON_MIN_LIMIT, JSON_INFLATE_RATIO * len(body))
                raw = inflate(body, limit) if col["encoding"] == "zlib" else body
                values = json.loads(raw)
                if type(values) is not list or len(values) != count:
                    raise MalformedObject("a json column does not hold its count of values")
                out[col["name"]] = values
            else:
                out[col["name"]] = _decode_numeric(body, col["type"], count, col["encoding"])
    except (struct.error, KeyError, TypeError, ValueError, RecursionError, zlib.error) as exc:
        if isinstance(exc, MalformedObject):
            raise
        raise MalformedObject(f"damaged column chunk: {exc}") from exc
    return out
