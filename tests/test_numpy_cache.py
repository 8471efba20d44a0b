"""numpy arrays: a digest is cached only where the bytes provably cannot change."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from memostore import forget_digest, memo


@memo
def total(arr: np.ndarray) -> float:
    return float(arr.sum())


def _poke(buffer_owner: bytes, value: int) -> None:
    """Write into a bytes object's memory, as a C extension could (invisible to Python)."""
    address = id(buffer_owner) + sys.getsizeof(b"") - 1  # CPython: the data follows the header
    ctypes.memset(address, value, 1)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="pokes CPython's bytes layout")
def test_an_array_over_bytes_is_hashed_once(store_dir: Path) -> None:
    data = bytes(os.urandom(4096))
    arr = np.frombuffer(data, dtype=np.uint8)
    key = total.key(arr)
    first = arr[0]
    # Change the bytes behind memostore's back (a bytes object cannot change in
    # Python): the cached digest is reused, proving the array is not re-hashed.
    _poke(data, (int(first) + 1) % 256)
    assert arr[0] != first
    assert total.key(arr) == key
    forget_digest(arr)
    assert total.key(arr) != key
    _poke(data, int(first))


def test_arrays_over_bytes_key_by_content(store_dir: Path) -> None:
    data = bytes(range(256)) * 4
    arr = np.frombuffer(data, dtype=np.uint8)
    assert total.key(arr) == total.key(np.frombuffer(bytes(data), dtype=np.uint8))
    assert total.key(arr) == total.key(arr.copy())  # cached or not, the same digest
    view = arr[::2]
    assert total.key(view) == total.key(view.copy())
    shaped = arr.reshape(32, 32)
    assert total.key(shaped) != total.key(arr)
    via_view = np.frombuffer(memoryview(data), dtype=np.uint16)
    assert total.key(via_view) == total.key(via_view.copy())


def test_an_owning_array_made_read_only_is_rehashed(store_dir: Path) -> None:
    arr = np.arange(1000, dtype=np.int64)
    arr.flags.writeable = False
    key = total.key(arr)
    arr.flags.writeable = True  # an owner can always take its write permission back
    arr[0] = 99
    arr.flags.writeable = False
    assert total.key(arr) != key


def test_read_only_views_of_writable_memory_are_rehashed(store_dir: Path) -> None:
    owner = np.zeros(100)
    view = owner.view()
    view.flags.writeable = False
    key = total.key(view)
    owner[3] = 1.0
    assert total.key(view) != key

    raw = bytearray(800)
    through_bytearray = np.frombuffer(memoryview(raw).toreadonly(), dtype=np.float64)
    key = total.key(through_bytearray)
    raw[0] = 1
    assert total.key(through_bytearray) != key


def test_a_read_only_memmap_is_rehashed(tmp_path: Path, store_dir: Path) -> None:
    path = tmp_path / "values.bin"
    np.arange(64, dtype=np.float32).tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r")
    key = total.key(mapped)
    with open(path, "r+b") as f:
        f.write(np.float32(7).tobytes())
    assert total.key(mapped) != key


def test_an_in_place_reshape_of_a_cached_array_is_seen(store_dir: Path) -> None:
    arr = np.frombuffer(bytes(range(64)), dtype=np.uint8)
    flat = total.key(arr)
    arr.shape = (8, 8)
    assert total.key(arr) != flat
    arr.shape = (64,)
    assert total.key(arr) == flat
