"""Canonical digests of values.

The digest of a value is the id of its content-addressed encoding (see
``docs/format.md``), computed without writing anything. A value restored from
the store therefore has a digest the store already knows.
"""

from __future__ import annotations

from typing import Any

from ..code.deps import use_value_digest
from .encoding import Encoder, HashSink


def digest_value(obj: Any) -> str:
    """The 64-hex digest of *obj* (equal values give equal digests, in any process)."""
    return Encoder(HashSink(), lineage=None).encode_value(obj)


# Code digests key the data globals a function reads by this digest.
use_value_digest(digest_value)
