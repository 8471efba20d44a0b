"""Datasets and DataLoaders: round trips, sharing, digest policy and caching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from codec_helpers import cached_digest, digest, roundtrip  # noqa: E402
from conftest import run_script, write_script  # noqa: E402
from torch.utils.data import (  # noqa: E402
    ConcatDataset,
    DataLoader,
    Dataset,
    Subset,
    TensorDataset,
    random_split,
)

from memostore import Store, memo  # noqa: E402
from torch_codecs.data import DatasetCodec  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


class Squares(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[float, float]:
        return float(i), float(i * i)


def make_split(n: int = 2000) -> tuple[TensorDataset, Subset, Subset]:
    g = torch.Generator().manual_seed(0)
    base = TensorDataset(torch.randn(n, 3, generator=g), torch.arange(n))
    train, val = random_split(base, [0.9, 0.1], generator=torch.Generator().manual_seed(1))
    return base, train, val


def test_datasets_round_trip_sharing_their_base(store: Store) -> None:
    base, train, val = make_split()
    both = ConcatDataset([train, val])
    (train2, val2, both2, squares), _ = roundtrip((train, val, both, Squares(5)), store)
    assert train2.indices == train.indices and isinstance(train2.indices, list)
    assert train2.dataset is val2.dataset, "one base dataset, restored once"
    assert both2.datasets[0] is train2 or both2.datasets[0].dataset is train2.dataset
    assert torch.equal(train2[7][0], train[7][0]) and len(both2) == len(base)
    assert squares[3] == (3.0, 9.0) and type(squares) is Squares


def test_split_digest_depends_on_the_split_seed() -> None:
    base, train, _ = make_split()
    again = random_split(base, [0.9, 0.1], generator=torch.Generator().manual_seed(1))[0]
    other = random_split(base, [0.9, 0.1], generator=torch.Generator().manual_seed(2))[0]
    assert digest(train) == digest(again) != digest(other)


def test_long_index_lists_are_stored_as_a_blob(store: Store) -> None:
    _, train, _ = make_split(50_000)
    _, doc_id = roundtrip(train, store)
    assert len(store.objects.get_doc(doc_id).data) < 2000, "indices must not be inline JSON"


def test_dataset_digest_is_cached_until_it_changes() -> None:
    base, train, _ = make_split()
    assert DatasetCodec().fingerprint(train) is not None
    first = cached_digest(train)
    assert cached_digest(train) == first
    base.tensors[0][train.indices[0], 0] += 1.0  # in place: the version counter moves
    changed = cached_digest(train)
    assert changed != first and changed == digest(train)
    train.indices.append(train.indices[0])  # a list edit is seen too
    assert cached_digest(train) == digest(train) != changed


def test_numpy_backed_dataset_is_rehashed_each_time() -> None:
    import numpy as np

    class Arrays(Dataset):
        def __init__(self) -> None:
            self.x = np.zeros(4)

    ds = Arrays()
    assert DatasetCodec().fingerprint(ds) is None
    first = cached_digest(ds)
    ds.x[0] = 1.0
    assert cached_digest(ds) != first


def loader_key(loader: DataLoader) -> str:
    @memo(store=Store.in_memory())
    def count(loader: DataLoader) -> int:
        return 0

    return count.key(loader)


def test_loader_digest_policy() -> None:
    _, train, _ = make_split()
    torch.manual_seed(0)
    key = loader_key(DataLoader(train, batch_size=8, shuffle=True))
    torch.manual_seed(1)
    assert loader_key(DataLoader(train, batch_size=8, shuffle=True)) == key
    assert loader_key(DataLoader(train, batch_size=8, shuffle=True, num_workers=2)) == key
    assert loader_key(DataLoader(train, batch_size=8, shuffle=True, pin_memory=True)) == key
    assert loader_key(DataLoader(train, batch_size=16, shuffle=True)) != key
    assert loader_key(DataLoader(train, batch_size=8, shuffle=False)) != key
    assert loader_key(DataLoader(train, batch_size=8, shuffle=True, drop_last=True)) != key
    seeded = [
        loader_key(
            DataLoader(
                train, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(seed)
            )
        )
        for seed in (0, 0, 1)
    ]
    assert seeded[0] == seeded[1] != seeded[2] and key not in seeded


def collate_pairs(batch: list[Any]) -> list[Any]:
    return batch


def test_loader_restores_with_all_settings(store: Store) -> None:
    _, train, _ = make_split(64)
    gen = torch.Generator().manual_seed(5)
    loader = DataLoader(
        train,
        batch_size=8,
        shuffle=True,
        generator=gen,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=3,
        drop_last=True,
        collate_fn=collate_pairs,
        timeout=30,
    )
    restored, _ = roundtrip(loader, store)
    for name in ("batch_size", "drop_last", "num_workers", "persistent_workers", "prefetch_factor"):
        assert getattr(restored, name) == getattr(loader, name), name
    assert restored.timeout == 30 and restored.collate_fn is collate_pairs
    assert type(restored.sampler).__name__ == "RandomSampler"
    assert restored.generator is restored.sampler.generator
    for dl in (restored, loader):  # iterate in-process: same batches as the original
        dl.num_workers, dl.timeout = 0, 0
    assert [[int(x[1]) for x in b] for b in restored] == [[int(x[1]) for x in b] for b in loader]


def test_iterable_and_custom_sampler_loaders(store: Store) -> None:
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            return iter(range(5))

    _, train, _ = make_split(40)
    sampler = torch.utils.data.SubsetRandomSampler([1, 2, 3], torch.Generator().manual_seed(0))
    (stream, custom), _ = roundtrip(
        (DataLoader(Stream(), batch_size=2), DataLoader(train, sampler=sampler, batch_size=2)),
        store,
    )
    assert [b.tolist() for b in stream] == [[0, 1], [2, 3], [4]]
    assert sorted(int(i) for b in custom for i in b[1]) == sorted(
        train.indices[i] for i in (1, 2, 3)
    )


DATA_SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split
from memostore import memo


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([float(i)]), torch.tensor([float(i * i)])


def to_map_style(items):
    class _MapStyle(Dataset):
        def __init__(self, data):
            self.data = list(data)

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.data[i]

    return _MapStyle(items)


def note(name):
    with open("runs.txt", "a") as f:
        f.write(name + "\\n")


@memo
def load(n: int):
    note("load")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    ds = TensorDataset(x, (x.sum(1) > 0).long())
    train, val = random_split(ds, [0.8, 0.2], generator=torch.Generator().manual_seed(1))
    return train, val, to_map_style(range(5)), Squares(4)


@memo
def count(loader):
    note(f"count {loader.batch_size}")
    return sum(len(batch[0]) for batch in loader)


@memo(rng="ignore")
def count_any_order(loader):
    note(f"any order {loader.batch_size}")
    return sum(len(batch[0]) for batch in loader)


train, val, local, squares = load(100)
print(len(train), len(val), train.indices[:5], train.dataset is val.dataset)
print(local[3], squares[2][1].item(), type(local).__name__, type(squares).__name__)
torch.manual_seed(int(sys.argv[1]))
loader = DataLoader(train, batch_size=int(sys.argv[2]), shuffle=True, num_workers=int(sys.argv[3]))
print(count(loader), count_any_order(loader))
"""


@pytest.mark.slow
def test_datasets_and_loaders_across_processes(tmp_path: Path) -> None:
    script = write_script(tmp_path, "data.py", DATA_SCRIPT)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    outputs = [
        run_script(script, *args, env=env).stdout.splitlines()
        for args in (("0", "8", "0"), ("0", "8", "2"), ("1", "8", "0"), ("3", "16", "0"))
    ]
    runs = (tmp_path / "runs.txt").read_text().splitlines()
    # Shuffling draws from the global RNG: another seed is another call (unless the
    # function says the draws do not matter); num_workers never changes the key.
    assert runs == [
        "load",
        "count 8",
        "any order 8",
        "count 8",
        "count 16",
        "any order 16",
    ]
    assert len({tuple(out[:2]) for out in outputs}) == 1
    assert outputs[0][0].endswith("True") and outputs[0][1] == "3 4.0 _MapStyle Squares"
    assert [out[2] for out in outputs] == ["80 80"] * 4
