"""Hugging Face ``datasets``: Datasets keyed by content, stored as Arrow data, restored mapped."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import run_script, write_script

datasets = pytest.importorskip("datasets")
from memostore import memo  # noqa: E402
from memostore.values.file_digests import RACY_WINDOW_NS  # noqa: E402

datasets.disable_progress_bars()


def _saved(path: Path, offset: int = 0, rows: int = 200) -> Path:
    ds = datasets.Dataset.from_dict(
        {"x": list(range(offset, offset + rows)), "text": [f"row {i}" for i in range(rows)]}
    )
    ds.save_to_disk(str(path))
    return path


def _arrow_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.arrow"))


@memo
def count(ds: object) -> int:
    return len(ds)  # type: ignore[arg-type]


def test_load_from_disk_is_keyed_by_content_not_location(tmp_path: Path, store_dir: Path) -> None:
    original = _saved(tmp_path / "original")
    key = count.key(datasets.load_from_disk(str(original)))
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(original, copy)
    assert count.key(datasets.load_from_disk(str(copy))) == key

    # Swap the Arrow file for one with other rows of the same schema: a miss.
    other = _saved(tmp_path / "other", offset=1000)
    (arrow,) = _arrow_files(copy)
    shutil.copyfile(_arrow_files(other)[0], arrow)
    assert count.key(datasets.load_from_disk(str(copy))) != key


def test_a_dataset_key_changes_with_an_in_place_format(tmp_path: Path, store_dir: Path) -> None:
    ds = datasets.load_from_disk(str(_saved(tmp_path / "d")))
    plain = count.key(ds)
    assert count.key(ds) == plain
    ds.set_format("numpy")
    as_numpy = count.key(ds)
    assert as_numpy != plain
    ds.set_format("numpy", columns=["x"])
    assert count.key(ds) not in (plain, as_numpy)
    ds.set_transform(lambda batch: batch)
    assert count.key(ds) not in (plain, as_numpy)
    ds.reset_format()
    assert count.key(ds) == plain
    assert count.key(ds.with_format("numpy")) == as_numpy


def test_indices_and_in_memory_tables_are_content(tmp_path: Path, store_dir: Path) -> None:
    def make(values: list[int]) -> object:
        return datasets.Dataset.from_dict({"v": values})

    assert count.key(make([1, 2, 3])) == count.key(make([1, 2, 3]))
    assert count.key(make([1, 2, 3])) != count.key(make([1, 2, 4]))
    base = make(list(range(50)))
    assert count.key(base.select([0, 1])) == count.key(make(list(range(50))).select([0, 1]))
    assert count.key(base.select([0, 1])) != count.key(base.select([1, 0]))
    train = base.train_test_split(test_size=0.2, seed=0)
    assert count.key(train) != count.key(base)


RESULT_SCRIPT = """
import sys
import datasets
datasets.disable_progress_bars()
from memostore import memo

@memo(files=("path",))
def prepare(path):
    print("RUN", flush=True)
    ds = datasets.load_from_disk(path)
    # In memory: a shuffle's indices file would otherwise be written into path
    # (datasets' cache), changing the content the next call is keyed by.
    ds = ds.shuffle(seed=0, keep_in_memory=True).select(range(50), keep_in_memory=True)
    ds.set_format("numpy", columns=["x"])
    small = datasets.Dataset.from_dict({"y": [1.5, 2.5]})
    return datasets.DatasetDict({"train": ds, "extra": small})

out = prepare(sys.argv[1])
train = out["train"]
print("TABLE", type(train.data).__name__)
restored = all(f["filename"].startswith(sys.argv[2]) for f in train.cache_files)
print("FILES", restored)
print("FORMAT", train.format["type"], train.format["columns"])
print("ROWS", len(train), train[:3]["x"].tolist(), out["extra"]["y"])
if restored:  # map on the body's own value would write its cache into path
    print("MAP", train.map(lambda r: {"z": r["x"] * 2})[:2]["z"].tolist())
print("KEY", prepare.key(sys.argv[1]))
"""


def test_a_dataset_result_is_restored_in_another_process(tmp_path: Path, store_dir: Path) -> None:
    source = _saved(tmp_path / "source")
    script = write_script(tmp_path, "prepare.py", RESULT_SCRIPT)
    first = run_script(script, str(source), str(store_dir))
    second = run_script(script, str(source), str(store_dir))
    assert "RUN" in first.stdout
    assert "RUN" not in second.stdout
    assert "TABLE MemoryMappedTable" in second.stdout
    assert "FILES True" in second.stdout  # mapped from the store's checkouts
    assert "FORMAT numpy ['x']" in second.stdout

    def lines(out: str, tag: str) -> str:
        return next(line for line in out.splitlines() if line.startswith(tag))

    for tag in ("ROWS", "KEY"):
        assert lines(first.stdout, tag) == lines(second.stdout, tag)
    assert lines(second.stdout, "MAP") == "MAP [210, 12]"
    assert list(store_dir.glob("checkouts/*/cache-*.arrow"))  # map's cache: beside the link
    assert not list(store_dir.glob("objects/**/cache-*.arrow"))  # never in the objects

    # The same files elsewhere: a hit.
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    third = run_script(script, str(copy), str(store_dir))
    assert "RUN" not in third.stdout


def test_a_restored_dataset_keys_like_the_original(tmp_path: Path, store_dir: Path) -> None:
    @memo
    def build(n: int) -> object:
        ds = datasets.Dataset.from_dict({"v": list(range(n))})
        return ds.select(range(0, n, 2))

    original = build(20)
    restored = build(20)
    assert restored is not original
    assert list(restored["v"]) == list(original["v"])
    assert count.key(restored) == count.key(original)


def test_a_dataset_rewritten_in_place_misses(tmp_path: Path, store_dir: Path) -> None:
    path = _saved(tmp_path / "d")
    ds = datasets.load_from_disk(str(path))
    # Let the files age past the racy window, so the dataset's digest is cached.
    age = time.time() - (RACY_WINDOW_NS / 1e9 + 1)
    for arrow in _arrow_files(path):
        os.utime(arrow, (age, age))
    time.sleep(RACY_WINDOW_NS / 1e9 + 0.2)  # ctime moved with utime: wait it out
    key = count.key(ds)
    assert count.key(ds) == key
    # The same rows' bytes rewritten in place (same inode) with other values: the
    # mapped dataset sees them, and so must its key.
    other = _saved(tmp_path / "other", offset=7)
    (arrow,) = _arrow_files(path)
    with open(arrow, "r+b") as f:
        f.write(_arrow_files(other)[0].read_bytes())
    assert count.key(ds) != key
