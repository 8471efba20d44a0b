"""Storing, restoring and hashing PyTorch values, against safetensors and raw blake3.

Measures, each as the median of ``--runs`` runs (``RESULT`` lines for
``run_all.py``; the targets are those of the keys and torch issues):

1. **Store on a miss**: a memoised function returns a state_dict of ``--size-mib``
   MiB in 200 tensors; the call stores it into an empty store (write, hash,
   fsync). Baseline: ``safetensors.torch.save_file`` of the same dict plus an
   fsync of the file. Target: at most 1.5x.
2. **Restore on a hit**: the same call again (nothing runs; the result is
   restored and every blob is checked against its id). Baseline:
   ``safetensors.torch.load_file``. Target: at most 1.2x. Also reported: both
   followed by a pass over every byte (``restore + read``), since both may map
   the file lazily.
3. **Deduplication**: 10 results of 10 ``Linear(1000, 1000)`` layers each, 9 of
   the 10 layers identical across results. Target: the store holds at most
   1.15x the unique bytes.
4. **First digest** of a ``--digest-mib`` MiB tensor (the digest cache emptied
   with ``memostore.forget_digest`` before each run) against one
   single-threaded ``blake3`` pass over the same bytes. Target: at least 0.7x
   its throughput.
5. **Repeated digest** of unchanged values (a module holding 1,000 tensors, a
   dataset of 1,000 tensors, datasets of 1 MB and 100 MB and a random split):
   at most 1 ms, and independent of byte size.
6. **Keys of later calls**: ``train(dataset, k)`` called 5 times with a
   ``--dataset-mb`` MB dataset from a memoised loader (from its miss, then from
   its hit): each call's key against hashing the dataset once. Target: under 5%.

A restored blob is memory-mapped and checked against its id on a background
thread (``torch_codecs/checks.py``); the restore is also timed with the check
done before returning (``eager``). The per-process record of checked blobs is
cleared before each timed restore, as in a fresh process. Before each timed
restore (memostore's and safetensors' alike) the file system is synced, so
that the writeback of the gigabyte just stored, which stalls file-system calls
for milliseconds on a small machine, falls in neither timing. Run from the
repository root::

    python benchmarks/bench_torch_store.py                 # 1 GiB
    python benchmarks/bench_torch_store.py --size-mib 256 --digest-mib 256 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import blake3
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, result, rotate

from memostore import forget_digest, ignore_global, memo
from memostore.hashing import digest_value
from torch_codecs import checks

TENSORS = 200


def make_state_dict(size_mib: int) -> dict[str, torch.Tensor]:
    per = (size_mib << 20) // TENSORS // 4
    gen = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(per, generator=gen) for i in range(TENSORS)}


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def touch_all(value: Any) -> float:
    tensors = value.values() if isinstance(value, dict) else value
    return float(sum(t.double().sum() for t in tensors))


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _size(mib: int) -> str:
    return f"{mib >> 10} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib} MiB"


def bench_store_restore(size_mib: int, runs: int, work: Path) -> list[dict]:
    # What is timed is storing and restoring the result: the state dict the body
    # returns is not also an input (a closure holding data is keyed by its value).
    sd = ignore_global(make_state_dict(size_mib))
    times: dict[str, list[float]] = {
        k: [] for k in ("store", "load", "eager", "touch", "st_store", "st_load", "st_touch")
    }
    for run in range(runs):
        root = work / f"store{run}"

        @memo(store=root)
        def produce(tag: str) -> dict[str, torch.Tensor]:
            return sd

        produce.key("warm")  # code digest and codec registry, outside the timing
        times["store"].append(timed(lambda produce=produce: produce("miss"))[0])
        for mode, name in (("background", "load"), ("eager", "eager")):
            checks.forget_verified()
            checks.set_check_mode(mode)
            os.sync()
            elapsed, restored = timed(lambda produce=produce: produce("miss"))
            checks.wait_for_checks()
            assert torch.equal(restored["layer7.weight"], sd["layer7.weight"])
            times[name].append(elapsed)
        checks.set_check_mode("background")
        checks.forget_verified()
        os.sync()
        times["touch"].append(timed(lambda produce=produce: touch_all(produce("miss")))[0])
        checks.wait_for_checks()
        shutil.rmtree(root)

        path = work / f"baseline{run}.safetensors"

        def save(path: Path = path) -> None:
            save_file(sd, str(path))
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        times["st_store"].append(timed(save)[0])
        os.sync()
        times["st_load"].append(timed(lambda path=path: load_file(str(path)))[0])
        os.sync()
        times["st_touch"].append(timed(lambda path=path: touch_all(load_file(str(path))))[0])
        path.unlink()

    med = {k: statistics.median(v) for k, v in times.items()}
    label = f"{size_mib} MiB state_dict, {TENSORS} tensors"
    report(
        f"store on a miss ({label})",
        med["store"],
        med["st_store"],
        "safetensors save_file+fsync",
        "<= 1.5",
    )
    report(
        f"restore on a hit ({label})",
        med["load"],
        med["st_load"],
        "safetensors load_file",
        "<= 1.2",
    )
    report(
        f"restore on a hit, eager check ({label})",
        med["eager"],
        med["st_load"],
        "safetensors load_file",
        "(no target)",
    )
    report(f"restore + read every byte ({label})", med["touch"], med["st_touch"],
           "safetensors load_file + read", "(no target)")  # fmt: skip
    what = f"{_size(size_mib)} state_dict of {TENSORS} tensors"
    note = f"median of {runs}"
    return [
        result("torch.store", f"Store a {what} on a miss", ours=med["store"],
               baseline=med["st_store"], baseline_name="safetensors save_file + fsync",
               kind="max", limit=1.5, note=note),
        result("torch.restore", f"Restore a {what} on a hit (blobs mapped, checked in the "
               "background)", ours=med["load"], baseline=med["st_load"],
               baseline_name="safetensors load_file", kind="max", limit=1.2, note=note),
        result("torch.restore_eager", f"Restore a {what} on a hit, every blob checked before "
               "returning", ours=med["eager"], baseline=med["st_load"],
               baseline_name="safetensors load_file", kind="info", note=note),
        result("torch.restore_read", f"Restore a {what} on a hit, then read every byte",
               ours=med["touch"], baseline=med["st_touch"],
               baseline_name="safetensors load_file, then read every byte", kind="info",
               note=note),
    ]  # fmt: skip


def bench_dedup(work: Path) -> dict:
    root = work / "dedup"
    torch.manual_seed(0)
    shared = [torch.nn.Linear(1000, 1000) for _ in range(9)]

    @memo(store=root)
    def layers(i: int) -> torch.nn.ModuleList:
        torch.manual_seed(100 + i)
        return torch.nn.ModuleList([*shared, torch.nn.Linear(1000, 1000)])

    for i in range(10):
        layers(i)
    unique = (9 + 10) * sum(p.numel() * 4 for p in shared[0].parameters())
    held = tree_bytes(root / "objects") + tree_bytes(root / "packs")
    ratio = held / unique
    print(
        f"dedup (10 results x 10 Linear(1000,1000), 9 shared): store holds {held / 1e6:.1f} MB "
        f"for {unique / 1e6:.1f} MB unique, ratio {ratio:.3f} (target <= 1.15)"
    )
    shutil.rmtree(root)
    return result(
        "torch.dedup",
        "Store size: 10 results of 10 Linear(1000, 1000), 9 layers shared",
        ours=held / 1e6,
        baseline=unique / 1e6,
        baseline_name="unique bytes",
        unit="MB",
        kind="max",
        limit=1.15,
        note="every object file of the store counted",
    )


def bench_first_digest(size_mib: int, runs: int) -> list[dict]:
    """memostore's first digest of a large tensor against raw blake3 over its bytes."""
    gen = torch.Generator().manual_seed(0)
    t = torch.randn((size_mib << 20) // 4, generator=gen)
    view = memoryview(t.numpy()).cast("B")  # blake3 takes bytes, not floats

    def ours() -> None:
        forget_digest(t)  # a first digest: nothing cached for this tensor
        digest_value(t)

    times = rotate(
        {
            "ours": ours,
            "blake3": lambda: blake3.blake3(view).digest(),
            "blake3_mt": lambda: blake3.blake3(view, max_threads=blake3.blake3.AUTO).digest(),
        },
        max(runs, 5),
    )
    nbytes = t.numel() * 4
    rate = {k: nbytes / v / 1e9 for k, v in times.items()}
    print(
        f"first digest of a {size_mib} MiB tensor: memostore {rate['ours']:.2f} GB/s, "
        f"blake3 single-threaded {rate['blake3']:.2f} GB/s, "
        f"blake3 all cores {rate['blake3_mt']:.2f} GB/s"
    )
    what = f"First digest of a {_size(size_mib)} tensor (throughput)"
    note = (
        f"{rate['ours']:.2f} GB/s vs {rate['blake3']:.2f} GB/s; memostore hashes large "
        f"blobs on every core; median of {max(runs, 5)}"
    )
    return [
        result("keys.first_digest", what, ours=rate["ours"], baseline=rate["blake3"],
               baseline_name="blake3, one thread", unit="GB/s", ratio=rate["ours"] / rate["blake3"],
               kind="min", limit=0.7, note=note),
        result("keys.first_digest_mt", f"{what}, against blake3 on every core",
               ours=rate["ours"], baseline=rate["blake3_mt"],
               baseline_name="blake3, all cores", unit="GB/s",
               ratio=rate["ours"] / rate["blake3_mt"], kind="info"),
    ]  # fmt: skip


def _repeated(value: Any, repeat: int) -> float:
    """Median seconds of a digest of *value* once its first digest filled the caches."""
    digest_value(value)
    times = [timed(lambda: digest_value(value))[0] for _ in range(repeat)]
    return statistics.median(times)


def bench_repeated_digest(runs: int) -> list[dict]:
    repeat = max(runs, 5) * 4
    note = f"median of {repeat}"
    module = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(500)])
    t_module = _repeated(module, repeat)
    many = torch.utils.data.TensorDataset(*[torch.randn(64) for _ in range(1000)])
    t_many = _repeated(many, repeat)
    small = torch.utils.data.TensorDataset(torch.randn(1_000, 250), torch.arange(1_000))
    big = torch.utils.data.TensorDataset(torch.randn(100_000, 250), torch.arange(100_000))
    t_small, t_big = _repeated(small, repeat), _repeated(big, repeat)
    split = torch.utils.data.random_split(big, [0.9, 0.1])[0]
    t_split = _repeated(split, repeat)
    for name, seconds in (
        ("module of 500 Linear layers (1,000 tensors)", t_module),
        ("TensorDataset of 1,000 tensors", t_many),
        ("TensorDataset of 1 MB", t_small),
        ("TensorDataset of 100 MB", t_big),
        ("Subset of it (90,000 indices)", t_split),
    ):
        print(f"repeated digest, {name}: median {seconds * 1e3:.3f} ms")
    return [
        result("keys.repeat_module", "Repeated digest of an unchanged module of 1,000 tensors",
               ours=t_module * 1e3, unit="ms", kind="below", limit=1, note=note),
        result("keys.repeat_dataset", "Repeated digest of an unchanged dataset of 1,000 "
               "tensors", ours=t_many * 1e3, unit="ms", kind="below", limit=1, note=note),
        result("keys.repeat_size", "Repeated digest, unchanged TensorDataset of 100 MB against "
               "one of 1 MB", ours=t_big * 1e3, baseline=t_small * 1e3,
               baseline_name="the 1 MB one", unit="ms", kind="max", limit=2,
               note="'independent of byte size' read as within 2x for 100x the bytes"),
        result("keys.repeat_subset", "Repeated digest, random_split Subset of the 100 MB "
               "dataset (90,000 indices)", ours=t_split * 1e3, unit="ms", kind="info",
               note=note),
    ]  # fmt: skip


def bench_train_keys(dataset_mb: int, runs: int, work: Path) -> dict:
    """Keys of memoised ``train(dataset, k)`` calls with a dataset from a memoised loader."""
    root = work / "train-keys"
    cols = 255  # plus a label column of int64: about 1 KB a row
    rows = dataset_mb * 1_000_000 // (cols * 4 + 8)

    @memo(store=root)
    def load_data(rows: int) -> torch.utils.data.TensorDataset:
        gen = torch.Generator().manual_seed(0)
        return torch.utils.data.TensorDataset(
            torch.randn(rows, cols, generator=gen), torch.arange(rows)
        )

    @memo(store=root)
    def train(data: torch.utils.data.Dataset, k: int) -> int:
        return k

    def key_costs(data: Any) -> list[float]:
        costs = []
        for k in range(5):
            costs.append(timed(lambda k=k: train.key(data, k))[0])
            train(data, k)
        return costs

    from_miss = key_costs(load_data(rows))  # stored now; its digest came from the store
    restored = load_data(rows)  # a hit: restored, digest known from the store
    from_hit = key_costs(restored)

    def hash_once() -> None:
        for obj in (restored, *restored.tensors):
            forget_digest(obj)
        digest_value(restored)

    once = statistics.median(timed(hash_once)[0] for _ in range(max(runs, 3)))
    later = max(from_miss[1:] + from_hit[1:])
    print(
        f"train(dataset, k) x5, {dataset_mb} MB dataset: hashing it once {once * 1e3:.1f} ms; "
        f"keys from the loader's miss {[round(c * 1e3, 2) for c in from_miss]} ms, "
        f"from its hit {[round(c * 1e3, 2) for c in from_hit]} ms"
    )
    shutil.rmtree(root)
    return result(
        "keys.train_calls",
        f"Key of each later train(dataset, k) call, {dataset_mb} MB dataset from a memoised loader",
        ours=later * 1e3,
        baseline=once * 1e3,
        baseline_name="hashing the dataset once",
        unit="ms",
        kind="max",
        limit=0.05,
        note="the slowest of the later calls (dataset from the loader's miss and from its hit); "
        f"first calls: {from_miss[0] * 1e3:.2f} ms and {from_hit[0] * 1e3:.2f} ms",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="state_dict size")
    parser.add_argument("--digest-mib", type=int, default=1024, help="tensor of the first digest")
    parser.add_argument("--dataset-mb", type=int, default=400, help="dataset of train(...) keys")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-store", action="store_true", help="no store/restore timing")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-torch-", dir=os.environ.get("BENCH_DIR")))
    try:
        if not args.skip_store:
            bench_store_restore(args.size_mib, args.runs, work)
        bench_dedup(work)
        bench_first_digest(args.digest_mib, args.runs)
        bench_repeated_digest(args.runs)
        bench_train_keys(args.dataset_mb, args.runs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
