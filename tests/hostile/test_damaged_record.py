"""The verified record: what lets a hit skip hashing, and what takes that away.

A restore hashes a mapped blob unless the store's record shows its file
unchanged since it was written, pulled or proven. These tests count the bytes
hashed (``memostore.odb.verified.hashed_bytes``) rather than time anything: an
unchanged store, a pulled one, a pushed one and one whose blobs were reused
cost no hashing; damage the file system cannot show (a forged record stands in
for a disk flipping a bit under an unchanged stat) is caught by ``fsck``, whose
finding makes the next call recompute, and by ``set_check_mode("always")``.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memostore import Store, memo  # noqa: E402
from memostore.lifecycle.maintenance import fsck  # noqa: E402
from memostore.odb import verified as record  # noqa: E402
from memostore.odb.verified import fine_grained_ctimes, hashed_bytes, stamp_of  # noqa: E402
from memostore.remote import pull, push  # noqa: E402
from torch_codecs import set_check_mode  # noqa: E402

LAYOUTS = ("loose", "packed")


def reference(layout: str, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if layout == "loose":
        return {"w": torch.randn(3_000_000, generator=gen)}  # 12 MB: a loose blob
    return {f"w{i}": torch.randn(1 << 20, generator=gen) for i in range(3)}  # 4 MiB each


def mapped_bytes(layout: str) -> int:
    return sum(t.nbytes for t in reference(layout).values())


def same(value: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    equal = value.keys() == expected.keys()
    return equal and all(torch.equal(value[k], expected[k]) for k in expected)


def hashed_by(fn: object) -> int:
    """Bytes of mapped files hashed while *fn* runs."""
    before = hashed_bytes()
    fn()  # type: ignore[operator]
    return hashed_bytes() - before


@pytest.fixture
def weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> object:
    """A memoised function of one 12 MB tensor or three 4 MiB ones, and its run count."""
    runs: list[str] = []

    @memo
    def weights(layout: str) -> dict[str, torch.Tensor]:
        runs.append(layout)
        return reference(layout)

    weights.runs = runs  # type: ignore[attr-defined]
    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "store"))
    if not fine_grained_ctimes(tmp_path):
        pytest.skip("coarse ctimes here: what was written in the last 2 s is hashed when read")
    return weights


def use(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    monkeypatch.setenv("MEMOSTORE_DIR", str(root))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_unchanged_store_is_restored_without_hashing(
    layout: str, weights: object, tmp_path: Path
) -> None:
    weights(layout)  # type: ignore[operator]
    assert hashed_by(lambda: weights(layout)) == 0  # type: ignore[operator]
    record.forget_known()  # as a fresh process: the record is read from disk
    assert hashed_by(lambda: weights(layout)) == 0  # type: ignore[operator]
    assert weights.runs == [layout]  # type: ignore[attr-defined]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pulls_and_pushes_keep_the_record(
    layout: str, weights: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights(layout)  # type: ignore[operator]
    push(Store(tmp_path / "store"), str(tmp_path / "remote"))
    # A push hard-links loose blobs (a new ctime): the store carried its proof across.
    record.forget_known()
    assert hashed_by(lambda: weights(layout)) == 0  # type: ignore[operator]
    pull(Store(tmp_path / "pulled"), str(tmp_path / "remote"))
    use(monkeypatch, tmp_path / "pulled")
    record.forget_known()
    hashed = hashed_by(lambda: weights(layout))  # type: ignore[operator]
    assert hashed == 0, "a pull verifies what it writes and records it"
    assert weights.runs == [layout]  # type: ignore[attr-defined]


def test_reused_and_repacked_blobs_stay_proven(
    weights: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights("loose")  # type: ignore[operator]
    weights("packed")  # type: ignore[operator]

    @memo
    def again(layout: str) -> dict[str, torch.Tensor]:
        return reference(layout)  # the same tensors: their blobs are freshened, not written

    again("loose")
    again("packed")
    record.forget_known()
    assert hashed_by(lambda: (weights("loose"), weights("packed"))) == 0  # type: ignore[operator]
    store = Store(tmp_path / "store")
    (pack,) = store.objects.packs.packs()
    store.objects.rewrite_pack(pack, list(pack.members))  # gc's rewrite: a new file
    record.forget_known()
    assert hashed_by(lambda: again("packed")) == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fsck_findings_make_the_next_call_recompute(
    layout: str, weights: object, tmp_path: Path
) -> None:
    weights(layout)  # type: ignore[operator]
    store = Store(tmp_path / "store")
    key = damage_under_the_record(store, layout)
    problems = fsck(store).problems
    assert any("corrupt" in p.message for p in problems)
    assert not os.path.exists(store.objects.verified.path_of(key)), "fsck dropped the record"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = weights(layout)  # type: ignore[operator]
    assert same(value, reference(layout)) and len(caught) == 1
    assert "corrupt" in str(caught[0].message) and len(weights.runs) == 2  # type: ignore[attr-defined]
    assert fsck(Store(tmp_path / "store")).problems == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_always_mode_hashes_what_the_record_vouches_for(
    layout: str, weights: object, tmp_path: Path
) -> None:
    weights(layout)  # type: ignore[operator]
    set_check_mode("always")
    try:
        assert hashed_by(lambda: weights(layout)) >= mapped_bytes(layout)  # type: ignore[operator]
        damage_under_the_record(Store(tmp_path / "store"), layout)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = weights(layout)  # type: ignore[operator]
    finally:
        set_check_mode("recorded")
    assert same(value, reference(layout)) and len(caught) == 1
    assert len(weights.runs) == 2  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="check mode"):
        set_check_mode("background")


def damage_under_the_record(store: Store, layout: str) -> str:
    """Flip a byte, then record the file's new stamp as proven: what a disk flipping a
    bit under an unchanged stat looks like to a reader. Returns the file's record key."""
    objects = store.objects
    sizes = {i: objects.size_of(i) for i in objects.iter_ids()}
    blob = max((i for i, n in sizes.items() if n >= 4 << 20), key=lambda i: (sizes[i], i))
    loc = objects.pack_location(blob)
    if loc is None:
        path, at, key = objects.path_of(blob), sizes[blob] // 2, f"objects/{blob[:2]}/{blob[2:]}"
    else:
        path, at, key = Path(loc.pack.path), loc.offset + loc.length // 2, f"packs/{loc.pack.name}"
    assert (layout == "loose") == (loc is None)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, 0o444)
    assert objects.verified.add(key, stamp_of(os.stat(path)))
    return key


def test_a_young_stamp_is_not_trusted_on_coarse_file_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kernels before Linux 6.13 (and many file servers) give ctimes of a clock tick: a
    # change in the same tick as the stamp would not show. Seen as such a file system:
    monkeypatch.setattr(record, "_fine_grained", {os.stat(tmp_path).st_dev: False})
    monkeypatch.setattr(record, "RACY_NS", 300_000_000)

    @memo
    def weights(layout: str) -> dict[str, torch.Tensor]:
        return reference(layout)

    use(monkeypatch, tmp_path / "store")
    weights("loose")
    assert not (tmp_path / "store" / "verified").exists(), "the write was too recent"
    size = blob_bytes(tmp_path / "store")
    assert hashed_by(lambda: weights("loose")) == size
    time.sleep(0.35)  # older than RACY_NS now: the next proof is recorded
    assert hashed_by(lambda: weights("loose")) == size
    assert hashed_by(lambda: weights("loose")) == 0


def test_torn_and_garbage_record_lines_are_ignored(weights: object, tmp_path: Path) -> None:
    weights("loose")  # type: ignore[operator]
    store = Store(tmp_path / "store")
    (blob,) = [i for i in store.objects.iter_ids() if store.objects.size_of(i) > 8 << 20]
    path = Path(store.objects.verified.path_of(f"objects/{blob[:2]}/{blob[2:]}"))
    line = path.read_bytes().strip()
    path.write_bytes(line[: len(line) // 2])  # an append cut short
    record.forget_known()
    size = blob_bytes(tmp_path / "store")
    assert hashed_by(lambda: weights("loose")) == size  # type: ignore[operator]
    assert hashed_by(lambda: weights("loose")) == 0, "proven again, after the torn line"  # type: ignore[operator]
    forged = line.replace(b" * ", b" " + b"ab" * 32 + b" ")  # listed members, check unchanged
    path.write_bytes(b"garbage\n" + forged + b"\n")
    record.forget_known()
    assert hashed_by(lambda: weights("loose")) == size  # type: ignore[operator]


def blob_bytes(root: Path) -> int:
    """Bytes of the store's large blobs (header and data: what a proof hashes)."""
    objects = Store(root).objects
    return sum(n for i in objects.iter_ids() if (n := objects.size_of(i)) >= 4 << 20)
