"""The argument documents of calls made of small scalars, kept per process.

``lr=0.01, epochs=20, name="base"``: most calls of a memoised function pass a
few numbers and short strings, and a hit pays for encoding them again (the
node, its canonical JSON, its BLAKE3 digest) on every call. Their document
depends on nothing but the names, the exact types and the values, so it is
built once and looked up by them afterwards.

The lookup key holds each value's exact type (``1``, ``1.0``, ``True`` and
``"1"`` key differently, as they encode differently) and, for a float, its
``float.hex()`` (``0.0 == -0.0`` but they encode differently). Anything else
(a big int, a long string, a NaN, a tuple, any object) is encoded as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..odb.objects import KIND_VALUE, Doc, check_finite

# Bounds that keep each cached document small; larger values are encoded as usual.
_INT_LIMIT = 1 << 63
_STR_MAX = 256
_MAX_ENTRIES = 4096

_docs: dict[tuple[Any, ...], Doc] = {}


def _lookup_key(items: Sequence[tuple[str, Any]]) -> tuple[Any, ...] | None:
    """The cache key of these (name, value) pairs, or None if one value is not a small scalar."""
    key: list[Any] = []
    for name, value in items:
        cls = type(value)
        if cls is int:
            if not -_INT_LIMIT < value < _INT_LIMIT:
                return None
        elif cls is str:
            if len(value) > _STR_MAX:
                return None
        elif cls is float:
            if not check_finite(value):
                return None
            value = value.hex()
        elif not (cls is bool or value is None):
            return None
        key += (name, cls, value)
    return tuple(key)


def document(items: Sequence[tuple[str, Any]]) -> Doc | None:
    """The arguments' document (as ``Encoder.encode_mapping`` builds it), if every
    value is a small scalar: each of them is its own node then."""
    key = _lookup_key(items)
    if key is None:
        return None
    doc = _docs.get(key)
    if doc is None:
        if len(_docs) >= _MAX_ENTRIES:
            _docs.clear()
        doc = Doc(KIND_VALUE, {"node": {"$": "args", "items": [[n, v] for n, v in items]}})
        _docs[key] = doc
    return doc
