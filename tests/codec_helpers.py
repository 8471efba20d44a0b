"""Digest and round-trip helpers shared by the codec tests."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from memostore import Store
from memostore.values.decoding import Decoder
from memostore.values.encoding import Encoder, HashSink, StoreSink


def digest(value: Any) -> str:
    """The value's digest, computed from scratch (no digest cache)."""
    return Encoder(HashSink(), cache=None).encode_value(value)


def cached_digest(value: Any) -> str:
    """The value's digest, through the per-process digest cache."""
    return Encoder(HashSink()).encode_value(value)


def roundtrip(value: Any, store: Store) -> tuple[Any, str]:
    """Store *value*, check the hash-only digest agrees, restore it fresh."""
    enc = Encoder(StoreSink(store.objects))
    doc_id = enc.encode_value(value)
    assert digest(value) == doc_id
    return Decoder(store.objects, enc.payloads).decode_value(doc_id), doc_id


def flip_byte_at(path: Path, at: int) -> None:
    """Damage a store file in place: flip the lowest bit of its byte at *at*."""
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)  # store files are read-only
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 1]))
