"""Pack files: the small tensor blobs of one stored value share a file.

Every store operation treats a packed object like a loose one: hits across
processes, deduplication, gc, fsck, damage and its repair, push and pull.
"""

from __future__ import annotations

import copy
import io
import json
import os
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from codec_helpers import flip_byte_at  # noqa: E402
from conftest import run_script, write_script  # noqa: E402

from memostore import Store, ignore_global, memo  # noqa: E402
from memostore.errors import CorruptObject  # noqa: E402
from memostore.lifecycle.maintenance import fsck, gc  # noqa: E402
from memostore.odb.packs import PACK_BLOB_MAX  # noqa: E402
from memostore.odb.verified import forget_known, hashed_bytes  # noqa: E402
from memostore.records.evaluation import eval_ref_name  # noqa: E402
from memostore.remote import pull, push  # noqa: E402
from memostore.values.decoding import Decoder  # noqa: E402
from memostore.values.encoding import Encoder, StoreSink  # noqa: E402
from torch_codecs.blobs import MMAP_MIN_BYTES  # noqa: E402

SCRIPT = """\
import sys
import torch
from memostore import memo


@memo
def weights(layers, side, seed):
    print("RUN weights")
    gen = torch.Generator().manual_seed(seed)
    return {f"l{i}": torch.randn(side, side, generator=gen) for i in range(layers)}


w = weights(int(sys.argv[1]), int(sys.argv[2]), 0)
print("SUM", float(sum(t.double().sum() for t in w.values())))
"""


def pack_files(root: Path) -> list[Path]:
    return sorted((root / "packs").glob("*.pack"))


def tensors(n: int, side: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {f"l{i}": torch.randn(side, side, generator=gen) for i in range(n)}


def blob_ids(store: Store, doc_id: str) -> set[str]:
    return set(store.objects.get_doc(doc_id).links.blobs)


def test_a_value_of_many_tensors_is_one_pack_hit_across_processes(store_dir: Path) -> None:
    script = write_script(store_dir.parent, "train.py", SCRIPT)
    first = run_script(script, "40", "128").stdout
    assert "RUN weights" in first
    (pack,) = pack_files(store_dir)
    loose = [p for p in (store_dir / "objects").rglob("*") if p.is_file()]
    assert all(p.stat().st_size < 128 * 128 * 4 for p in loose), "tensor blobs are packed"
    second = run_script(script, "40", "128").stdout
    assert "RUN" not in second
    assert second.splitlines()[-1] == first.splitlines()[-1], "bit-identical values"
    assert pack_files(store_dir) == [pack]


def test_large_packed_tensors_come_from_one_mapping_each_on_a_storage_of_its_own(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store")
    side = 512  # 1 MiB each: mapped
    value = {**tensors(4, side), "small": torch.arange(10.0)}
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    (pack,) = pack_files(store.root)
    restored = Decoder(store.objects).decode_value(doc_id)
    assert all(torch.equal(restored[k], value[k]) for k in value)
    big = [restored[f"l{i}"] for i in range(4)]
    pointers = [t.untyped_storage().data_ptr() for t in big]
    assert max(pointers) - min(pointers) < pack.stat().st_size, "one mapping of the pack"
    for t in [*big, restored["small"]]:
        # Exactly the tensor's bytes: torch.save and deepcopy never carry the pack.
        assert t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.nbytes
    saved = io.BytesIO()
    torch.save(big[0], saved)
    assert len(saved.getvalue()) < 1.01 * big[0].nbytes + 4096
    assert torch.equal(copy.deepcopy(big[1]), value["l1"])
    big[0][0, 0] = 1e6  # copy-on-write: the store is untouched
    again = Decoder(store.objects).decode_value(doc_id)
    assert torch.equal(again["l0"], value["l0"])


def test_blobs_over_the_pack_limit_stay_loose(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    big = torch.zeros(PACK_BLOB_MAX // 4 + 1)
    doc_id = Encoder(StoreSink(store.objects)).encode_value({"big": big, "small": torch.ones(3)})
    (big_blob,) = [b for b in blob_ids(store, doc_id) if store.objects.size_of(b) > PACK_BLOB_MAX]
    assert store.objects.blob_path(big_blob) is not None, "a loose file, hard-linkable"
    assert store.objects.pack_location(big_blob) is None
    assert len(pack_files(store.root)) == 1
    restored = Decoder(store.objects).decode_value(doc_id)["big"]
    assert torch.equal(restored, big)
    assert restored.storage_offset() == 0 and restored.untyped_storage().nbytes() == big.nbytes


def test_equal_tensors_are_stored_once_across_packs(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    first = tensors(10, 200)
    second = {**{k: v.clone() for k, v in first.items()}, "l9": torch.randn(200, 200)}
    Encoder(StoreSink(store.objects)).encode_value(first)
    Encoder(StoreSink(store.objects)).encode_value(second)
    packs = pack_files(store.root)
    assert len(packs) == 2
    members = sorted(len(store.objects.packs.packs()[i].members) for i in range(2))
    assert members == [1, 10], "the second pack holds only the new tensor"
    unique = 11 * 200 * 200 * 4
    assert sum(p.stat().st_size for p in packs) < 1.05 * unique


def test_a_pack_written_by_another_store_object_is_found(tmp_path: Path) -> None:
    reader = Store(tmp_path / "store")
    assert not reader.objects.contains("ab" * 32)  # lists the (empty) packs directory
    writer = Store(tmp_path / "store")
    doc_id = Encoder(StoreSink(writer.objects)).encode_value(tensors(3, 64))
    restored = Decoder(reader.objects).decode_value(doc_id)
    assert torch.equal(restored["l2"], tensors(3, 64)["l2"])


def test_a_failed_encoding_leaves_no_pack_and_no_temp_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")

    @memo(store=store)
    def make() -> tuple[dict[str, torch.Tensor], object]:
        import threading

        return tensors(3, 64), threading.Lock()  # a lock cannot be stored

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value, _ = make()
    assert torch.equal(value["l0"], tensors(3, 64)["l0"]), "the result is returned"
    assert any("could not store" in str(w.message) for w in caught)
    assert pack_files(store.root) == []
    assert list((store.root / "tmp").iterdir()) == []


def _store_two(store: Store) -> tuple[str, str, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    a = tensors(10, 100)
    b = {**{k: v.clone() for k, v in a.items()}, "l9": torch.randn(100, 100)}
    # Not keyed by the data the closure holds: each result's pack alone is under test.
    ignore_global(a)
    ignore_global(b)

    @memo(store=store)
    def produce(tag: str) -> dict[str, torch.Tensor]:
        return a if tag == "a" else b

    produce("a")
    produce("b")
    return produce.symbol, produce.key("a"), a, b


def test_gc_rewrites_a_partly_dead_pack_and_removes_a_dead_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    symbol, key_a, _, b = _store_two(store)
    name_a = eval_ref_name(symbol, key_a)
    (pack_a,) = [p for p in store.objects.packs.packs() if len(p.members) == 10]
    assert store.refs.delete_if_equals(name_a, store.refs.read(name_a))
    dead = set(pack_a.members) - _all_reachable_blobs(store)
    assert len(dead) == 1, "only a's l9 is unique to a"

    young = gc(store)  # default grace: packs written just now are kept
    assert young.deleted == [] and young.kept_young >= 1

    report = gc(store, grace_s=0)
    assert set(report.deleted) >= dead
    assert report.bytes_freed >= 100 * 100 * 4
    assert not Path(pack_a.path).exists(), "rewritten without its dead member"
    (dead_id,) = dead
    assert not store.objects.contains(dead_id)
    assert fsck(store).problems == []
    fresh = Store(store.root)  # another process's view
    (ref_b,) = [t for _, t in fresh.refs.iter("")]
    restored = Decoder(fresh.objects).decode_value(fresh.objects.get_doc(ref_b).body["result"])
    assert all(torch.equal(restored[k], b[k]) for k in b)

    for name, target in list(store.refs.iter("")):
        store.refs.delete_if_equals(name, target)
    gc(store, grace_s=0)
    assert pack_files(store.root) == []


def _reachable_blobs(store: Store, root: str) -> set[str]:
    seen: set[str] = set()
    stack = [root]
    blobs: set[str] = set()
    while stack:
        doc = store.objects.get_doc(stack.pop())
        blobs |= doc.links.blobs
        stack.extend(d for d in doc.links.docs if d not in seen)
        seen |= doc.links.docs
    return blobs


def _all_reachable_blobs(store: Store) -> set[str]:
    out: set[str] = set()
    for _, target in store.refs.iter(""):
        out |= _reachable_blobs(store, target)
    return out


def test_a_damaged_member_is_quarantined_and_its_pack_mates_kept(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    value = tensors(3, 512)  # 1 MiB each: mapped, proven before use
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    (pack,) = store.objects.packs.packs()
    victim = next(iter(pack.members))
    offset, length = pack.members[victim]
    flip_byte_at(Path(pack.path), offset + length - 1)
    with pytest.raises(CorruptObject):
        Decoder(store.objects).decode_value(doc_id)
    assert not Path(pack.path).exists() and not store.objects.contains(victim)
    assert list((store.root / "quarantine").glob("*.pack.*")), "kept aside, not deleted"
    mates = set(pack.members) - {victim}
    assert all(store.objects.blob_path(m) is not None for m in mates), "rescued as loose files"
    Encoder(StoreSink(store.objects)).encode_value(value)  # a recompute repairs the store
    restored = Decoder(store.objects).decode_value(doc_id)
    assert all(torch.equal(restored[k], value[k]) for k in value)
    assert fsck(store).problems == []


def test_fsck_names_a_pack_whose_index_is_damaged(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    Encoder(StoreSink(store.objects)).encode_value(tensors(3, 32))
    (pack,) = pack_files(store.root)
    flip_byte_at(pack, pack.stat().st_size - 40)  # inside the index
    problems = fsck(Store(store.root)).problems
    assert any(p.kind == "pack" and p.name == pack.name for p in problems)
    assert any("links missing object" in p.message for p in problems)
    report = gc(Store(store.root))
    assert report.packs_quarantined == 1 and not pack.exists()
    assert list((store.root / "quarantine").glob(f"{pack.name}.*")), "kept aside"
    assert not any(p.kind == "pack" for p in fsck(Store(store.root)).problems)


def test_push_and_pull_carry_packed_objects(store_dir: Path, tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", SCRIPT)
    first = run_script(script, "20", "64").stdout
    remote = tmp_path / "remote"
    push(Store(store_dir), str(remote))
    other = tmp_path / "other"
    pull(Store(other), str(remote))
    second = run_script(script, "20", "64", env={"MEMOSTORE_DIR": str(other)}).stdout
    assert "RUN" not in second and second.splitlines()[-1] == first.splitlines()[-1]


def test_gc_json_counts_packed_objects(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from memostore_cli.main import cli

    store = Store(tmp_path / "store")
    _store_two(store)
    for name, target in list(store.refs.iter("")):
        store.refs.delete_if_equals(name, target)
    out = CliRunner().invoke(cli, ["--store", str(store.root), "gc", "--grace", "0", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["objects_deleted"] >= 11 and pack_files(store.root) == []


def test_mapped_packed_tensors_are_proven_once_per_pack_stamp(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    value = tensors(2, 512)
    assert MMAP_MIN_BYTES <= 512 * 512 * 4
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    (pack,) = store.objects.packs.packs()
    record = store.root / "verified" / "packs" / pack.name
    record.unlink()  # as in a copied store: not proven here yet
    forget_known()
    before = hashed_bytes()
    Decoder(store.objects).decode_value(doc_id)
    assert hashed_bytes() - before == sum(n for _, n in pack.members.values())
    assert len(record.read_text().split()) == 2 * 7, "one line per member proven"
    forget_known()  # a fresh process reads the record
    before = hashed_bytes()
    Decoder(store.objects).decode_value(doc_id)
    assert hashed_bytes() == before


CRASH = """\
import os, signal, sys
import torch
import memostore.odb.object_store as object_store
from memostore import memo

point = sys.argv[1]
real_replace, real_write_all = os.replace, object_store.write_all
writes = 0


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def replace(src, dst, **kw):
    if str(dst).endswith(".pack") and point == "before-rename":
        die()
    real_replace(src, dst, **kw)
    if str(dst).endswith(".pack") and point == "after-rename":
        die()


def write_all(fd, data):
    global writes
    writes += 1
    if point == "member-write" and writes == 3:
        real_write_all(fd, data[: len(data) // 2])
        die()
    real_write_all(fd, data)


os.replace, object_store.write_all = replace, write_all


@memo
def weights(seed):
    print("RUN")
    gen = torch.Generator().manual_seed(seed)
    return {f"l{i}": torch.randn(64, 64, generator=gen) for i in range(8)}


print("SUM", float(sum(t.double().sum() for t in weights(0).values())))
"""


@pytest.mark.parametrize("point", ["member-write", "before-rename", "after-rename"])
def test_a_store_killed_while_writing_a_pack_loses_nothing(
    store_dir: Path, tmp_path: Path, point: str
) -> None:
    script = write_script(tmp_path, "crash.py", CRASH)
    killed = run_script(script, point, check=False)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert fsck(Store(store_dir)).problems == []
    gc(Store(store_dir), grace_s=0)
    assert not list((store_dir / "tmp").iterdir()) and pack_files(store_dir) == []
    first = run_script(script, "none").stdout
    assert "RUN" in first
    again = run_script(script, "none").stdout
    assert "RUN" not in again and again.splitlines()[-1] == first.splitlines()[-1]
    assert len(pack_files(store_dir)) == 1 and fsck(Store(store_dir)).problems == []


def test_an_object_in_two_packs_stays_found_when_one_goes(tmp_path: Path) -> None:
    from memostore.odb.object_store import DiskObjectStore

    objects = DiskObjectStore(tmp_path / "store")
    shared = b"s" * 5000
    first, second = objects.new_pack(), objects.new_pack()
    first_id = first.add((shared,), len(shared))
    # Two writers that did not see each other's pack (neither is finished yet),
    # as two processes storing at once may.
    second.add((b"other" * 100,), 500)
    second.add((shared,), len(shared))
    a, b = first.finish(), second.finish()
    assert a is not None and b is not None and a.name != b.name
    objects.rewrite_pack(a, [])  # gc: none of a's members reachable
    assert objects.get_bytes(first_id) == shared
    assert DiskObjectStore(tmp_path / "store").get_bytes(first_id) == shared


def test_a_pack_listed_in_the_same_clock_tick_is_still_found(tmp_path: Path) -> None:
    from memostore.odb.object_store import DiskObjectStore

    reader = DiskObjectStore(tmp_path / "store")
    writer = DiskObjectStore(tmp_path / "store")
    for n in range(20):  # each pack lands right after the reader's last listing
        pack = writer.new_pack()
        object_id = pack.add((f"member {n}".encode() * 50,), 50 * len(f"member {n}"))
        pack.finish()
        assert reader.get_bytes(object_id).startswith(b"member")


def test_gc_merges_many_small_old_packs(tmp_path: Path) -> None:
    from memostore.lifecycle.maintenance import MERGE_MIN_PACKS

    store = Store(tmp_path / "store")
    calls = []

    @memo(store=store)
    def small(seed: int) -> dict[str, torch.Tensor]:
        calls.append(seed)
        return tensors(3, 16, seed)

    count = MERGE_MIN_PACKS + 2
    for seed in range(count):
        small(seed)
    packs = pack_files(store.root)
    assert len(packs) == count
    old = 1_000_000_000.0
    for path in packs[:-1]:  # one pack stays within the grace period
        os.utime(path, (old, old))
    report = gc(store)
    assert report.packs_merged == count - 1 and report.deleted == []
    assert len(pack_files(store.root)) == 2
    fresh = Store(store.root)  # another process's view
    assert fsck(fresh).problems == []
    for _, target in fresh.refs.iter("evals/"):
        result = fresh.objects.get_doc(target).body["result"]
        assert len(Decoder(fresh.objects).decode_value(result)) == 3
    for seed in range(count):
        assert torch.equal(small(seed)["l2"], tensors(3, 16, seed)["l2"])
    assert calls == list(range(count)), "every call after the merge hits"


def test_repacking_into_a_pack_of_the_same_name_keeps_it(tmp_path: Path) -> None:
    from memostore.odb.object_store import DiskObjectStore

    objects = DiskObjectStore(tmp_path / "store")
    members = [f"member {n}".encode() * 100 for n in range(3)]
    small, big = objects.new_pack(), objects.new_pack()  # concurrent writers
    ids = [big.add((m,), len(m)) for m in members]
    small.add((members[0],), len(members[0]))
    a, b = small.finish(), big.finish()
    assert a is not None and b is not None
    # Merged, a's one member adds nothing to b's: the new pack *is* b.
    merged = objects.repack([(b, list(b.members)), (a, list(a.members))])
    assert merged is not None and merged.name == b.name and Path(b.path).exists()
    assert not Path(a.path).exists()
    fresh = DiskObjectStore(tmp_path / "store")
    assert [fresh.get_bytes(i) for i in ids] == members
    assert objects.rewrite_pack(b, list(b.members)) is not None  # all kept: itself
    assert [DiskObjectStore(tmp_path / "store").get_bytes(i) for i in ids] == members


READER = """\
import sys, time, warnings
import torch
from memostore import Store
from memostore.values.decoding import Decoder
from memostore.odb.verified import forget_known

store = Store(sys.argv[1])
doc_id, until = sys.argv[2], time.time() + float(sys.argv[3])
gen = torch.Generator().manual_seed(0)
expected = {f"l{i}": torch.randn(512, 512, generator=gen) for i in range(6)}
restores = 0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    while time.time() < until:
        forget_known()  # every restore reads the record again, as a fresh process does
        value = Decoder(store.objects).decode_value(doc_id)
        assert all(torch.equal(value[k], expected[k]) for k in expected), "wrong bytes"
        restores += 1
assert not caught, [str(w.message) for w in caught]
print("RESTORES", restores)
"""


def test_restores_in_another_process_survive_concurrent_repacks(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = Store(tmp_path / "store")
    value = tensors(6, 512)  # 1 MiB each: mapped from the pack, proven through the record
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    script = write_script(tmp_path, "reader.py", READER)
    reader = subprocess.Popen(
        [sys.executable, str(script), str(store.root), doc_id, "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    repacks = 0
    while reader.poll() is None:
        (pack,) = store.objects.packs.packs()
        order = list(pack.members)[::-1]  # another order: another pack, the old one deleted
        store.objects.repack([(pack, order)])
        repacks += 1
    out, err = reader.communicate()
    assert reader.returncode == 0, err
    assert repacks > 10 and int(out.split()[-1]) > 10
    assert not (store.root / "quarantine").exists(), "nothing taken for damage"
    assert fsck(Store(store.root)).problems == []


def test_a_big_value_goes_into_several_packs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memostore.values.encoding

    monkeypatch.setattr(memostore.values.encoding, "PACK_MAX_BYTES", 3 * 64 * 64 * 4)
    store = Store(tmp_path / "store")
    value = tensors(10, 64)
    doc_id = Encoder(StoreSink(store.objects)).encode_value(value)
    assert len(pack_files(store.root)) == 4, "3 + 3 + 3 + 1 tensors"
    restored = Decoder(Store(store.root).objects).decode_value(doc_id)
    assert all(torch.equal(restored[k], value[k]) for k in value)
