"""Tensors, parameters and generators: round trips, digests, sharing, blobs and caching."""

from __future__ import annotations

import ctypes
import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codec_helpers import digest, flip_byte_at, roundtrip  # noqa: E402
from safetensors.torch import load as safetensors_load  # noqa: E402

from memostore import MemostoreWarning, Store, forget_digest, memo  # noqa: E402
from memostore.errors import CorruptObject  # noqa: E402
from memostore.values.decoding import Decoder  # noqa: E402
from memostore.values.encoding import Encoder, HashSink, StoreSink  # noqa: E402
from memostore.values.hashcache import digest_cache  # noqa: E402
from torch_codecs.blobs import MMAP_MIN_BYTES  # noqa: E402
from torch_codecs.fingerprints import tensor_data_state  # noqa: E402
from torch_codecs.tensors import TensorCodec  # noqa: E402

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    *[getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)],
    *[getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)],
]


@pytest.fixture(params=["disk", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(tmp_path / "store") if request.param == "disk" else Store.in_memory()


def raw(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (3, 5)) -> torch.Tensor:
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return (torch.randn(shape) * 20).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_for_bit(dtype: torch.dtype, store: Store) -> None:
    t = sample(dtype)
    restored, _ = roundtrip(t, store)
    assert same_bytes(restored, t)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor(2.5),
        lambda: torch.zeros(0, 4),
        lambda: torch.randn(4, 6).T,
        lambda: torch.randn(5, 6)[::2, 1:],
        lambda: torch.randn(700, 1000),  # above the mmap threshold
        lambda: torch.randn(3, 2, dtype=torch.complex64).conj(),
    ],
    ids=["0d", "zero-size", "transposed", "strided", "large", "conj"],
)
def test_shapes_and_layouts_round_trip(make: Any, store: Store) -> None:
    t = make()
    restored, _ = roundtrip(t, store)
    assert torch.equal(restored, t.resolve_conj())


def test_digest_depends_on_dtype_shape_and_bytes_not_layout() -> None:
    t = torch.randn(4, 6)
    assert digest(t) == digest(t.clone()) == digest(t.T.contiguous().T)
    assert digest(t) != digest(t.double())
    assert digest(t) != digest(t.reshape(6, 4))
    u = t.clone()
    u[0, 0] += 1
    assert digest(t) != digest(u)
    assert digest(torch.tensor(1.0)) != digest(torch.tensor([1.0]))


def test_blob_is_a_safetensors_file_shared_by_equal_tensors(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    t = torch.randn(300, 1000)
    enc = Encoder(StoreSink(store.objects))
    enc.encode_value({"a": t, "b": t.clone()})
    enc.encode_value([t.clone()])
    blobs = [i for i in store.objects.iter_ids() if store.objects.size_of(i) > t.numel() * 4]
    assert len(blobs) == 1, "identical tensors must share one blob"
    # Small blobs of one value share a pack file; each is still a safetensors file.
    assert store.objects.pack_location(blobs[0]) is not None
    loaded = safetensors_load(store.objects.get_bytes(blobs[0]))["tensor"]
    assert torch.equal(loaded, t)


def test_views_restore_sharing_storage(store: Store) -> None:
    t = torch.arange(100.0)
    (a, b), _ = roundtrip((t, t[:10]), store)
    assert torch.equal(b, t[:10])
    a[0] = -1
    assert b[0] == -1, "the view must share storage with its base"

    (b, a), _ = roundtrip((t[:10], t), store)  # the view first
    a[1] = -2
    assert b[1] == -2

    m = torch.randn(10, 10)
    (x, xt, col), _ = roundtrip((m, m.T, m[2:5, 3]), store)
    assert torch.equal(xt, m.T) and torch.equal(col, m[2:5, 3])
    x[3, 3] = 100
    assert xt[3, 3] == 100 and col[1] == 100


def test_distinct_equal_tensors_stay_distinct(store: Store) -> None:
    z1, z2 = torch.zeros(5), torch.zeros(5)
    (a, b), _ = roundtrip((z1, z2), store)
    a += 1
    assert torch.equal(b, torch.zeros(5))
    (c, d), _ = roundtrip((z1, z1), store)
    assert c is d


def test_parameters_and_requires_grad(store: Store) -> None:
    p = torch.nn.Parameter(torch.randn(3, 2))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    leaf = torch.randn(4, requires_grad=True)
    nonleaf = leaf * 2
    (p2, p3, f2, l2, n2), _ = roundtrip((p, p, frozen, leaf, nonleaf), store)
    assert type(p2) is torch.nn.Parameter and p2 is p3 and p2.requires_grad
    assert type(f2) is torch.nn.Parameter and not f2.requires_grad
    assert l2.requires_grad and l2.is_leaf and n2.requires_grad and n2.is_leaf
    assert torch.equal(n2, nonleaf.detach())


def test_sparse_and_meta_tensors(store: Store) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coo = torch.sparse_coo_tensor([[0, 1, 2], [2, 0, 1]], [1.0, 2.0, 3.0], (3, 3))
        csr = torch.randn(4, 4).relu().to_sparse_csr()
        (coo2, csr2, meta2), _ = roundtrip((coo, csr, torch.empty(2, 3, device="meta")), store)
    assert torch.equal(coo2.to_dense(), coo.to_dense())
    assert csr2.layout == torch.sparse_csr and torch.equal(csr2.to_dense(), csr.to_dense())
    assert meta2.is_meta and meta2.shape == (2, 3)


def flip_last_byte(store: Store, min_size: int) -> Path:
    """Damage the one blob of at least *min_size* bytes; return the file that holds it."""
    (blob,) = [i for i in store.objects.iter_ids() if store.objects.size_of(i) >= min_size]
    loc = store.objects.pack_location(blob)
    if loc is None:
        path = store.objects.path_of(blob)
        at = path.stat().st_size - 1
    else:
        path = Path(loc.pack.path)
        at = loc.offset + loc.length - 1
    flip_byte_at(path, at)
    return path


def test_damaged_small_blob_fails_the_restore(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    doc_id = Encoder(StoreSink(store.objects)).encode_value(torch.randn(1000))
    flip_last_byte(store, 4000)
    with pytest.raises(CorruptObject):
        Decoder(store.objects).decode_value(doc_id)


def test_damaged_mapped_blob_fails_the_restore(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    doc_id = Encoder(StoreSink(store.objects)).encode_value(torch.randn(MMAP_MIN_BYTES // 2))
    path = flip_last_byte(store, MMAP_MIN_BYTES)
    with pytest.raises(CorruptObject):
        Decoder(store.objects).decode_value(doc_id)
    assert not path.exists(), "a damaged blob is moved out of the way"


def test_damaged_mapped_blob_makes_the_hit_a_miss(store_dir: Path) -> None:
    calls = []

    @memo
    def big(n: int) -> torch.Tensor:
        calls.append(n)
        return torch.arange(float(n))

    n = MMAP_MIN_BYTES // 2  # 2 MiB: restored through a memory map
    big(n)
    path = flip_last_byte(Store(store_dir), MMAP_MIN_BYTES)
    damaged_inode = path.stat().st_ino
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = big(n)  # proven before it returns: damaged, so recomputed
    assert len(caught) == 1 and "corrupt" in str(caught[0].message)
    assert "recomputing" in str(caught[0].message)
    assert torch.equal(again, torch.arange(float(n))) and calls == [n, n]
    assert path.stat().st_ino != damaged_inode, "written again by the recompute"
    assert list((store_dir / "quarantine").iterdir()), "the damaged blob is kept aside"
    restored = big(n)
    assert calls == [n, n] and torch.equal(restored, again)
    assert digest_cache.get(restored, tensor_data_state(restored)) is not None


def test_digest_cache_follows_in_place_changes() -> None:
    t = torch.randn(1000)
    first = Encoder(HashSink()).encode_value(t)
    assert Encoder(HashSink()).encode_value(t) == first
    t.add_(1)  # bumps the version counter
    second = Encoder(HashSink()).encode_value(t)
    assert second != first and second == digest(t)
    t.data.mul_(2)  # moves no version counter, but the alias is an exposure
    third = Encoder(HashSink()).encode_value(t)
    assert third == digest(t) != second
    t.numpy()[1] = 7.0  # so is a numpy view
    assert Encoder(HashSink()).encode_value(t) == digest(t) != third
    kept = t.data  # a live alias: never trusted while it lives
    kept[2] = -1.0
    assert Encoder(HashSink()).encode_value(t) == digest(t)
    kept[3] = -2.0
    assert Encoder(HashSink()).encode_value(t) == digest(t)
    del kept
    ctypes.memmove(t.data_ptr() + 4, t.data_ptr(), 4)  # a raw write: forget_digest
    forget_digest(t)
    assert Encoder(HashSink()).encode_value(t) == digest(t)
    view = t[:10]
    before = Encoder(HashSink()).encode_value(view)
    t[0] = 123.0  # a write through the base is seen by the view (shared counter)
    assert Encoder(HashSink()).encode_value(view) != before


def test_restored_tensor_enters_the_digest_cache(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    restored, doc_id = roundtrip(torch.randn(64), store)
    blob = store.objects.get_doc(doc_id).body["node"]["data"]["blob"]
    assert digest_cache.get(restored, tensor_data_state(restored)) == blob


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_cuda_tensor_restores_on_cpu_with_a_warning(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    enc = Encoder(StoreSink(store.objects))
    doc_id = enc.encode_value(torch.arange(6.0))
    node = dict(store.objects.get_doc(doc_id).body["node"], device="cuda:0")
    dec = Decoder(store.objects)
    with pytest.warns(MemostoreWarning, match="cuda"):
        t = TensorCodec().decode(node, dec)
    assert t.device.type == "cpu" and torch.equal(t, torch.arange(6.0))


def test_generators_and_rng_states_are_values(store: Store) -> None:
    g = torch.Generator().manual_seed(7)
    torch.randn(3, generator=g)
    g2, _ = roundtrip(g, store)
    assert torch.equal(torch.randn(5, generator=g), torch.randn(5, generator=g2))
    assert digest(torch.Generator().manual_seed(1)) == digest(torch.Generator().manual_seed(1))
    assert digest(torch.Generator().manual_seed(1)) != digest(torch.Generator().manual_seed(2))

    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    np_rng = np.random.default_rng(3)
    (t_state, np_state, py_state, rng2), _ = roundtrip((*states, np_rng), store)
    assert torch.equal(t_state, states[0])
    assert np.array_equal(np_state[1], states[1][1])
    assert py_state == states[2]
    assert rng2.integers(1 << 30) == np_rng.integers(1 << 30)


def test_dtypes_devices_and_formats_are_values(store: Store) -> None:
    values = (torch.float16, torch.bfloat16, torch.device("cuda", 1), torch.Size([2, 3]))
    restored, _ = roundtrip((*values, torch.channels_last), store)
    assert restored[:4] == values and restored[4] is torch.channels_last
    assert digest(torch.float16) != digest(torch.bfloat16)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_mapped_tensors_hold_no_file_descriptors(tmp_path: Path) -> None:
    # A restored model of thousands of tensors must not run out of descriptors
    # (a common limit is 1024): mappings are made and their files closed.
    store = Store(tmp_path / "store")
    value = [torch.full((MMAP_MIN_BYTES // 4,), float(i)) for i in range(40)]
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    before = len(os.listdir("/proc/self/fd"))
    restored = Decoder(store.objects).decode_value(doc_id)
    assert len(os.listdir("/proc/self/fd")) < before + 5
    assert all(torch.equal(a, b) for a, b in zip(restored, value, strict=True))
    restored[0][0] = -1.0  # copy-on-write: the store keeps its bytes
    again = Decoder(store.objects).decode_value(doc_id)
    assert again[0][0].item() == 0.0


def test_mapped_blobs_with_another_header_or_a_wide_dtype_restore(tmp_path: Path) -> None:
    import json
    import struct

    from memostore.odb.objects import KIND_VALUE, Doc, Links

    store = Store(tmp_path / "store")
    # complex128: 16-byte items, whose data may not start at a multiple of 16.
    wide = torch.randn(MMAP_MIN_BYTES // 16 + 3, dtype=torch.complex128)
    doc_id = Encoder(StoreSink(store.objects)).encode_value(wide)
    assert torch.equal(Decoder(store.objects).decode_value(doc_id), wide)
    # A blob whose header carries more than this version writes (longer header).
    t = torch.arange(MMAP_MIN_BYTES // 4, dtype=torch.float32)
    data = t.numpy().tobytes()
    entry = {"dtype": "F32", "shape": [t.numel()], "data_offsets": [0, len(data)]}
    text = json.dumps({"tensor": entry, "__metadata__": {"writer": "elsewhere"}}).encode()
    text += b" " * (-(8 + len(text)) % 8)
    blob_id = store.objects.add_bytes(struct.pack("<Q", len(text)) + text + data)
    node = {"$": "torch.tensor", "data": {"blob": blob_id}, "device": "cpu", "dtype": "float32",
            "nbytes": len(data), "requires_grad": False, "shape": [t.numel()]}  # fmt: skip
    doc_id = store.objects.add_doc(Doc(KIND_VALUE, {"node": node}, Links(blobs={blob_id})))
    restored = Decoder(store.objects).decode_value(doc_id)
    assert torch.equal(restored, t)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_values_round_trip_on_cuda(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    big = torch.randn(512, 512, device="cuda")  # 1 MiB: packed, mapped, then copied over
    small = torch.arange(10.0, device="cuda")
    model = torch.nn.Linear(4, 4).cuda()
    (big2, small2, model2), doc_id = roundtrip((big, small, model), store)
    assert big2.device.type == "cuda" and torch.equal(big2, big)
    assert small2.device.type == "cuda" and torch.equal(small2, small)
    assert all(p.device.type == "cuda" for p in model2.parameters())
    x = torch.randn(3, 4, device="cuda")
    assert torch.equal(model2(x), model(x))
    doc = store.objects.get_doc(doc_id)
    cpu_id = Encoder(StoreSink(store.objects)).encode_value((big.cpu(), small.cpu(), model.cpu()))
    assert doc_id != cpu_id, "the device is part of the value"
    assert set(store.objects.get_doc(cpu_id).links.blobs) & set(doc.links.blobs), "one blob"
