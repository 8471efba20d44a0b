"""Proving memory-mapped tensor blobs against their ids before a restore returns.

A large tensor is restored by mapping its blob (a loose file, or a member of a
pack), so a hit costs next to nothing whatever the tensor's size. The mapped
bytes are proven to be the blob's before any tensor is made from them: the
store hashes them (on every core) unless its verified record shows that the
file has not changed since it was written, pulled or last proven here or by
another process (``memostore/verified.py``). A mismatch quarantines the blob
and raises :class:`~memostore.errors.CorruptObject`, so the memoised call
becomes a miss: it recomputes, repairs the store and returns right values.

``set_check_mode("always")`` hashes every mapped blob on every restore, record
or not: for stores on media whose damage the file system would not show (a
disk that flips bits under an unchanged file), at the cost of hashing every
restored byte (0.3-0.7 s per GiB on two cores, as the machine is loaded).
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.odb.verified import Stamp

from .exposure import raw_numpy

MODES = ("recorded", "always")
_mode = "recorded"


def set_check_mode(mode: str) -> None:
    """Trust the verified record (``"recorded"``, the default) or hash ``"always"``."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"check mode must be one of {MODES}, not {mode!r}")
    _mode = mode


def check_mode() -> str:
    """The current check mode (see :func:`set_check_mode`)."""
    return _mode


def trusts_nothing() -> bool:
    """True in ``"always"`` mode: no record spares a mapped blob its hashing."""
    return _mode == "always"


def prove(
    objects: Any,
    blob_id: str,
    storage: torch.UntypedStorage,
    offset: int,
    length: int,
    path: str,
    stamp: Stamp,
    packed: bool = True,
) -> bool:
    """Prove the *length* bytes at *offset* of *storage*, mapped from *path*, are *blob_id*.

    *stamp* is the file's stamp, equal before and after it was mapped. Returns
    False when the file changed meanwhile (read the blob another way); raises
    CorruptObject when the bytes are not the blob's.
    """

    def data() -> memoryview:
        # The very bytes the tensor will be made of: the private mapping, untouched yet.
        view = torch.empty(0, dtype=torch.uint8).set_(storage[offset : offset + length])
        return memoryview(raw_numpy(view))

    return bool(
        objects.prove_mapped(blob_id, data, path, stamp, packed=packed, always=_mode == "always")
    )
