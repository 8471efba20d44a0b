"""Tensor blobs: one tensor's bytes as a safetensors file, written and read without copies.

The blob of a tensor holds exactly one entry, named ``tensor``::

    8 bytes   little-endian length N of the header
    N bytes   canonical JSON header (sorted keys, no spaces), padded with spaces
              so that the data starts at a multiple of 8
    ...       the tensor's bytes in C order

Everything in the file is a function of the tensor's dtype, shape and bytes, so
equal tensors give the same blob (and id) in any process: a blob is written
once and shared by every value that holds the same data. The header is built
here rather than by ``safetensors.torch.save`` so that hashing and writing stream
straight from the tensor's memory.

Restoring memory-maps a large blob copy-on-write: the tensor lives in the
mapping (the page cache), so a large result is never held twice in memory and a
hit costs next to nothing. The mapped bytes are proven to be the blob's before a
tensor is made of them (``checks.py``); a small blob is read whole and hashed.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from memostore.errors import CorruptObject, MalformedObject
from memostore.odb.objects import digest_bytes
from memostore.odb.packs import Pack, PackLocation
from memostore.odb.verified import ALL, Stamp, stamp_of

from .checks import prove, trusts_nothing
from .dtypes import BlobLayout, dtype_name, layout_for
from .exposure import raw_frombuffer, raw_numpy

TENSOR_KEY = "tensor"
# Tensors are streamed in pieces of this size when they must be copied first
# (non-contiguous or not in host memory), so a copy never doubles a large tensor.
STREAM_CHUNK = 64 << 20
# Blobs at least this large are memory-mapped; smaller ones are read into memory
# (a mapping per tiny tensor would exhaust the process's map count).
MMAP_MIN_BYTES = 1 << 20

Buffer = bytes | bytearray | memoryview
Producer = Callable[[], Iterable[Buffer]]


def header_bytes(layout: BlobLayout, nbytes: int) -> bytes:
    """The length prefix and header of a one-tensor safetensors file."""
    entry = {"dtype": layout.code, "shape": list(layout.shape), "data_offsets": [0, nbytes]}
    header: dict[str, Any] = {TENSOR_KEY: entry}
    if layout.metadata:
        header["__metadata__"] = dict(layout.metadata)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii")
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text


def data_nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def tensor_producer(t: torch.Tensor) -> tuple[Producer, int]:
    """A producer of *t*'s blob (header, then bytes in C order) and the blob's size.

    The tensor's memory is read in place when it is a contiguous host tensor;
    otherwise it is copied piecewise, :data:`STREAM_CHUNK` bytes at a time.
    """
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    nbytes = data_nbytes(t)
    header = header_bytes(layout_for(t.dtype, tuple(t.shape), nbytes), nbytes)

    def produce() -> Iterator[Buffer]:
        yield header
        if nbytes:
            yield from _tensor_chunks(t)

    return produce, len(header) + nbytes


def _tensor_chunks(t: torch.Tensor) -> Iterator[memoryview]:
    if t.device.type == "cpu" and t.is_contiguous():
        yield _host_view(t)
        return
    if t.is_contiguous():
        # A device tensor: copy it to the host a piece at a time.
        flat = t.reshape(-1)
        step = max(1, STREAM_CHUNK // max(1, t.element_size()))
        for start in range(0, flat.numel(), step):
            yield _host_view(flat[start : start + step].cpu())
        return
    if t.dim() == 0:
        yield _host_view(t.contiguous().cpu())
        return
    # Non-contiguous: whole slices along the first dimension, each made contiguous.
    row_bytes = max(1, data_nbytes(t[0]) if t.shape[0] else 1)
    rows = max(1, STREAM_CHUNK // row_bytes)
    for start in range(0, t.shape[0], rows):
        yield _host_view(t[start : start + rows].contiguous().cpu())


def _host_view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous host tensor, without copying."""
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(raw_numpy(t.reshape(-1).view(torch.uint8)))


# -- reading ------------------------------------------------------------------------------
def read_tensor(dec: Any, blob_id: str, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    """The tensor stored in blob *blob_id*, on the host, its bytes proven to be the blob's.

    A large packed blob is a slice of its pack, mapped once per restore; a large
    loose blob is mapped on its own. Both are mapped copy-on-write (writing to
    the tensor never touches the store), and the mapped bytes are proven against
    the blob id before the tensor is made (``checks.py``: through the store's
    verified record, else by hashing them); a small blob, packed or loose, is
    copied into a fresh buffer and hashed. A file that changes while it is
    mapped and proven is read whole instead. This runs once per restored
    tensor, so the common case is kept to a few calls: the expected header
    comes from a cache, and the pack's index (or the file's size) confirms it.
    """
    size = tuple(shape)
    expected, nbytes = _expected(dtype, size)
    t = _read(dec, blob_id, dtype, shape, size, expected, nbytes)
    # Built from the blob's own bytes, checked against the shape: the blob counts as
    # read, and each tensor made of it (again, for a repeated document) is charged.
    dec.charge(nbytes, f"a {dtype_name(dtype)} tensor of shape {list(size)}", blob_id, nbytes)
    return t


def _read(
    dec: Any,
    blob_id: str,
    dtype: torch.dtype,
    shape: list[int],
    size: tuple[int, ...],
    expected: bytes,
    nbytes: int,
) -> torch.Tensor:
    if not nbytes:
        buf = dec.objects.get_bytearray(blob_id)
        return _from_buffer(buf, blob_id, dtype, shape, expected, nbytes)
    loc = dec.objects.pack_location(blob_id, refresh=False)
    if loc is None:
        path = dec.blob_file(blob_id)
        try:
            st = os.stat(path) if path is not None else None
        except FileNotFoundError:
            # Not a loose file: in a pack written since this process listed them,
            # or removed since (the store then reads or reports it below).
            st = None
            loc = dec.objects.pack_location(blob_id)
        if st is not None and st.st_size >= MMAP_MIN_BYTES:
            found = _read_loose(dec, path, st, blob_id, dtype, size, expected, nbytes)
            if found is not None:
                return found
    if loc is not None:
        found = _read_packed(dec, loc, blob_id, dtype, size, expected, nbytes)
        if found is not None:
            return found
    buf = dec.objects.get_bytearray(blob_id)
    return _from_buffer(buf, blob_id, dtype, shape, expected, nbytes)


def _read_loose(
    dec: Any,
    path: str,
    st: os.stat_result,
    blob_id: str,
    dtype: torch.dtype,
    size: tuple[int, ...],
    expected: bytes,
    nbytes: int,
) -> torch.Tensor | None:
    """A large loose blob, mapped and proven; None if its file changed since its stat."""
    mapped = _map_file(path, st)
    if mapped is None:
        return None
    storage, stamp = mapped
    if not prove(dec.objects, blob_id, storage, 0, st.st_size, path, stamp, packed=False):
        return None
    start = len(expected)
    if st.st_size == start + nbytes and start % dtype.itemsize == 0:
        # The data follows a header of exactly the expected size, as the file's size
        # says (the proof covered the header too): no need to read the header.
        return _tensor_at(storage, start, nbytes, dtype, size)
    # A header of another size (a blob written elsewhere): parse it.
    raw = _tensor_at(storage, 0, st.st_size, torch.uint8, (st.st_size,))
    return _from_buffer(memoryview(raw_numpy(raw)), blob_id, dtype, list(size), expected, nbytes)


def _read_packed(
    dec: Any,
    loc: PackLocation,
    blob_id: str,
    dtype: torch.dtype,
    size: tuple[int, ...],
    expected: bytes,
    nbytes: int,
) -> torch.Tensor | None:
    """A packed blob, as a view of its pack's mapping; None if the pack went away.

    The pack is mapped once per restore, whatever the number of tensors in it:
    that is what makes a value of many tensors cheap to restore.
    """
    mapped = _map_pack(dec, loc.pack)
    if mapped is None:
        return None
    storage, stamp, proven = mapped
    if loc.length < MMAP_MIN_BYTES:
        # Small: copied out and checked at once, like a small loose blob, so that it
        # owns its storage (some torch calls read a storage from its start).
        raw = _tensor_at(storage, loc.offset, loc.length, torch.uint8, (loc.length,))
        buf = bytearray(memoryview(raw_numpy(raw)))
        actual = digest_bytes(buf)
        if actual != blob_id:
            dec.objects.quarantine(blob_id)
            raise CorruptObject(blob_id, actual, f"{loc.pack.path} at byte {loc.offset}")
        return _from_buffer(buf, blob_id, dtype, list(size), expected, nbytes)
    vouched = ALL in proven or blob_id in proven
    if not vouched and not prove(
        dec.objects, blob_id, storage, loc.offset, loc.length, loc.pack.path, stamp
    ):
        return None
    start = loc.offset + len(expected)
    if loc.length == len(expected) + nbytes and start % dtype.itemsize == 0:
        return _tensor_at(storage, start, nbytes, dtype, size)
    # A header of another size (a blob written elsewhere): parse it.
    raw = _tensor_at(storage, loc.offset, loc.length, torch.uint8, (loc.length,))
    view = memoryview(raw_numpy(raw))
    return _from_buffer(view, blob_id, dtype, list(size), expected, nbytes)


_SESSION_PACKS = "torch.mapped_packs"


def _map_pack(dec: Any, pack: Pack) -> tuple[torch.UntypedStorage, Stamp, frozenset[str]] | None:
    """The mapping of *pack* shared by this restore's tensors, the pack's stamp, and the
    members the verified record vouches for under that stamp (read once per restore)."""
    session = getattr(dec, "session", None)
    mapped = session.setdefault(_SESSION_PACKS, {}) if session is not None else {}
    found = mapped.get(pack.path)
    if found is None:
        try:
            st = os.stat(pack.path)
        except OSError:
            return None  # rewritten or removed by gc since it was listed
        file = _map_file(pack.path, st)
        if file is None:
            return None
        storage, stamp = file
        proven = (
            frozenset() if trusts_nothing() else dec.objects.proven_pack_members(pack.path, stamp)
        )
        found = mapped[pack.path] = (storage, stamp, proven)
    return found


def _map_file(path: str, st: os.stat_result) -> tuple[torch.UntypedStorage, Stamp] | None:
    """The whole file at *path* mapped copy-on-write, and its stamp; None if it changed.

    torch maps the file and closes it at once: a mapping made by Python's
    ``mmap`` keeps a file descriptor open for as long as it lives, and a
    restored model of thousands of tensors would run out of them. The file is
    opened by name, so it is stat-ed again after: the same stamp (ctime
    included, which any rename or write moves) means the mapping is of the
    inode that was stat-ed, unchanged.
    """
    stamp = stamp_of(st)
    try:
        storage = torch.UntypedStorage.from_file(path, shared=False, nbytes=st.st_size)
        if stamp_of(os.stat(path)) != stamp:
            return None
    except (OSError, RuntimeError):
        return None  # removed or replaced since the stat: let the store read or report it
    return storage, stamp


def _tensor_at(
    storage: torch.UntypedStorage,
    start: int,
    nbytes: int,
    dtype: torch.dtype,
    size: tuple[int, ...],
) -> torch.Tensor:
    """A tensor over *nbytes* of *storage* from byte *start*, on a storage of its own.

    The slice is a storage of exactly the tensor's bytes that keeps the mapping
    alive: ``torch.save``, ``copy.deepcopy`` or ``share_memory_()`` of a
    restored tensor then handle its bytes alone, never the rest of its file (a
    pack holds other tensors too), and calls that read a storage from its start
    see the tensor's first byte.
    """
    return torch.empty(0, dtype=dtype).set_(storage[start : start + nbytes], 0, size)


def _from_buffer(
    buf: Any, blob_id: str, dtype: torch.dtype, shape: list[int], expected: bytes, nbytes: int
) -> torch.Tensor:
    """The tensor in a blob's bytes (in memory, or mapped), its header checked.

    *expected* and *nbytes* are the header and data size a blob written here has.
    """
    start = len(expected)
    if len(buf) != start + nbytes or buf[:start] != expected:
        start, nbytes = _parse_header(buf, blob_id, dtype, shape)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    # Blob data starts at a multiple of 8 (see header_bytes): aligned for every dtype.
    flat = raw_frombuffer(buf, dtype=dtype, count=nbytes // dtype.itemsize, offset=start)
    return flat if len(shape) == 1 else flat.view(shape)


def _parse_header(buf: Any, blob_id: str, dtype: torch.dtype, shape: list[int]) -> tuple[int, int]:
    """Check a blob's header that is not the expected one byte for byte.

    The header of a blob written here is a function of dtype and shape, so this
    runs only for blobs written otherwise (or damaged): parse it and check it.
    """
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * dtype.itemsize
    try:
        (length,) = struct.unpack("<Q", bytes(buf[:8]))
        entry = json.loads(bytes(buf[8 : 8 + length]))[TENSOR_KEY]
        begin, end = entry["data_offsets"]
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise MalformedObject(f"blob {blob_id} is not a tensor blob: {exc}") from exc
    layout = layout_for(dtype, tuple(shape), nbytes)
    if (
        entry.get("dtype") != layout.code
        or tuple(entry.get("shape", ())) != layout.shape
        or end - begin != nbytes
        or 8 + length + end != len(buf)
    ):
        raise MalformedObject(
            f"blob {blob_id} holds {entry.get('dtype')}{entry.get('shape')}, "
            f"not the {dtype_name(dtype)}{list(shape)} its value describes"
        )
    return 8 + length + begin, nbytes


@functools.lru_cache(maxsize=4096)
def _expected(dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[bytes, int]:
    """The header a blob of *dtype* and *shape* has when written here, and its data size."""
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * dtype.itemsize
    return _expected_header(dtype, shape, nbytes), nbytes


@functools.lru_cache(maxsize=4096)
def _expected_header(dtype: torch.dtype, shape: tuple[int, ...], nbytes: int) -> bytes:
    return header_bytes(layout_for(dtype, shape, nbytes), nbytes)
