"""Storing, restoring and hashing PyTorch values, against safetensors and raw blake3.

Measures, each as the median of ``--runs`` runs (``RESULT`` lines for
``run_all.py``; the targets are those of the keys and torch issues):

1. **Store on a miss**: a memoised function returns a state_dict of ``--size-mib``
   MiB in 200 tensors; the call stores it into an empty store (write, hash,
   fsync). Baseline: ``safetensors.torch.save_file`` of the same dict plus an
   fsync of the file. Target: at most 1.5x.
2. **Restore on a hit**, every restored byte proven to match its blob id
   before the call returns, side by side (each timed restore starts with this
   process's copy of the verified record dropped, as in a fresh process):

   * *unchanged since written*: the blobs are in the store's verified record,
     so nothing is hashed. Baseline: ``safetensors.torch.load_file``. Target:
     at most 1.2x.
   * *not in the record* (a store copied with ``cp -r``; here the ``verified/``
     directory is deleted): every mapped byte is hashed first. Baseline:
     ``load_file`` followed by a pass over every byte. No target: hashing is
     bounded by BLAKE3's speed, which is below a plain read's.
   * *first hit after a pull* into another store (the pull records what it
     writes, as loose files). Same baseline and target.
   * supporting figures: ``set_check_mode("always")`` (every byte hashed on
     every restore), and a restore followed by a pass over every byte
     (``restore + read``), since both loaders may map the file lazily.
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

The restores of one run are timed in rotation (the order shifts by one each
run), so that load from other processes falls on every candidate alike.
Before each timed restore (memostore's and safetensors' alike) the file system
is synced, so that the writeback of the gigabyte just stored, which stalls
file-system calls for milliseconds on a small machine, falls in no timing. Run
from the repository root::

    python benchmarks/bench_torch_store.py                 # 1 GiB
    python benchmarks/bench_torch_store.py --size-mib 256 --digest-mib 256 --runs 3
    python benchmarks/bench_torch_store.py --store-only --tensors 100   # the miss alone
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

from memostore import Store, forget_digest, ignore_global, memo
from memostore.lifecycle import last_use
from memostore.odb.verified import forget_known, hashed_bytes
from memostore.remote import pull, push
from memostore.values.hashing import digest_value
from torch_codecs import checks

TENSORS = 200


def _remove(path: Path) -> None:
    """Delete a store directory, its hits' last-use notes written first (not into rmtree)."""
    last_use.flush()
    shutil.rmtree(path)


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


RESTORES = ("load", "unrecorded", "pulled", "always", "touch", "st_load", "st_touch")


def _memoised(sd: dict[str, torch.Tensor], root: Path, runs: list[str]) -> Any:
    """The benchmark's memoised function on the store at *root* (same key everywhere)."""

    @memo(store=root)
    def produce(tag: str) -> dict[str, torch.Tensor]:
        runs.append(tag)
        return sd

    return produce


def _fsynced_save(sd: dict[str, torch.Tensor], path: Path) -> None:
    save_file(sd, str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_store_restore(size_mib: int, runs: int, work: Path) -> list[dict]:
    # What is timed is storing and restoring the result: the state dict the body
    # returns is not also an input (a closure holding data is keyed by its value).
    sd = ignore_global(make_state_dict(size_mib))
    times: dict[str, list[float]] = {k: [] for k in ("store", "st_store", *RESTORES)}
    hashed: dict[str, list[int]] = {k: [] for k in RESTORES if not k.startswith("st_")}
    for run in range(runs):
        root, remote, pulled = work / f"store{run}", work / f"remote{run}", work / f"pulled{run}"
        ran: list[str] = ignore_global([])  # counts the body's runs; not part of any key
        produce = _memoised(sd, root, ran)
        produce.key("warm")  # code digest and codec registry, outside the timing
        path = work / f"baseline{run}.safetensors"
        stores = {
            "store": lambda produce=produce: produce("miss"),
            "st_store": lambda path=path: _fsynced_save(sd, path),
        }
        # In rotation, each after a sync: the writeback and discards of the previous
        # run's files (gigabytes) fall on neither candidate, nor on the same one always.
        for name in sorted(stores, reverse=run % 2 == 1):
            os.sync()
            times[name].append(timed(stores[name])[0])
        push(Store(root), str(remote))
        pull(Store(pulled), str(remote))
        _remove(remote)
        produce_pulled = _memoised(sd, pulled, ran)
        assert produce_pulled.key("miss") == produce.key("miss")

        def restore(name: str, produce: Any = produce, pulled_fn: Any = produce_pulled,
                    root: Path = root, path: Path = path) -> Any:  # fmt: skip
            if name == "st_load":
                return load_file(str(path))
            if name == "st_touch":
                return touch_all(load_file(str(path)))
            if name == "touch":
                return touch_all(produce("miss"))
            return (pulled_fn if name == "pulled" else produce)("miss")

        order = RESTORES[run % len(RESTORES) :] + RESTORES[: run % len(RESTORES)]
        for name in order:
            forget_known()  # as in a fresh process: the record is read from disk
            if name == "unrecorded":
                shutil.rmtree(root / "verified", ignore_errors=True)  # as after cp -r
            checks.set_check_mode("always" if name == "always" else "recorded")
            os.sync()
            before = hashed_bytes()
            elapsed, out = timed(lambda name=name: restore(name))
            checks.set_check_mode("recorded")
            times[name].append(elapsed)
            if name in hashed:
                hashed[name].append(hashed_bytes() - before)
            if isinstance(out, dict):
                assert torch.equal(out["layer7.weight"], sd["layer7.weight"])
        assert ran == ["miss"], f"every restore a hit: {ran}"
        _remove(root)
        _remove(pulled)
        path.unlink()

    med = {k: statistics.median(v) for k, v in times.items()}
    mib = {k: statistics.median(v) / 2**20 for k, v in hashed.items()}
    label = f"{size_mib} MiB state_dict, {TENSORS} tensors"
    lines = [
        ("store on a miss", "", "store", "st_store", "safetensors save_file+fsync", "<= 1.5"),
        ("restore on a hit, unchanged since written", "load", "load", "st_load",
         "safetensors load_file", "<= 1.2"),
        ("restore on a hit, blobs not in the record", "unrecorded", "unrecorded", "st_touch",
         "safetensors load_file + read", "(no target)"),
        ("first hit after a pull", "pulled", "pulled", "st_touch",
         "safetensors load_file + read", "<= 1.0"),
        ("first hit after a pull, against load_file alone", "pulled", "pulled", "st_load",
         "safetensors load_file", "(no target)"),
        ("restore, check mode always", "always", "always", "st_load", "safetensors load_file",
         "(no target)"),
        ("restore + read every byte", "touch", "touch", "st_touch",
         "safetensors load_file + read", "(no target)"),
    ]  # fmt: skip
    for name, counted, ours, theirs, baseline, target in lines:
        extra = f"; {mib[counted]:.0f} MiB hashed" if counted else ""
        report(f"{name} ({label}{extra})", med[ours], med[theirs], baseline, target)
    what = f"{_size(size_mib)} state_dict of {TENSORS} tensors"
    note = f"median of {runs}, restores in rotation"
    return [
        result("torch.store", f"Store a {what} on a miss", ours=med["store"],
               baseline=med["st_store"], baseline_name="safetensors save_file + fsync",
               kind="max", limit=1.5, note=note),
        result("torch.restore", f"Restore a {what} on a hit (blobs mapped, proven before "
               "returning: unchanged since written, per the verified record)", ours=med["load"],
               baseline=med["st_load"], baseline_name="safetensors load_file", kind="max",
               limit=1.2, note=f"{note}; {mib['load']:.0f} MiB hashed"),
        result("torch.restore_unrecorded", f"Restore a {what} on a hit, blobs not in the "
               "verified record (as after cp -r): every byte hashed before returning",
               ours=med["unrecorded"], baseline=med["st_touch"],
               baseline_name="safetensors load_file, then read every byte", kind="info",
               note=f"{note}; {mib['unrecorded']:.0f} MiB hashed: bounded by BLAKE3's speed, "
               "slower than a plain read of every byte"),
        result("torch.restore_pulled", f"First hit of a {what} after a pull into another store",
               ours=med["pulled"], baseline=med["st_touch"],
               baseline_name="safetensors load_file, then read every byte", kind="max",
               limit=1.0, note=f"{note}; {mib['pulled']:.0f} MiB hashed; "
               f"{med['pulled'] / med['st_load']:.2f}x load_file alone (loose files)"),
        result("torch.restore_eager", f"Restore a {what} on a hit with check mode \"always\" "
               "(every byte hashed on every restore)", ours=med["always"],
               baseline=med["st_load"], baseline_name="safetensors load_file", kind="info",
               note=f"{note}; {mib['always']:.0f} MiB hashed"),
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
    _remove(root)
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
    _remove(root)
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


def bench_store_only(size_mib: int, runs: int, work: Path) -> dict:
    """Only the store on a miss against save_file + fsync, in rotation, each after a sync."""
    sd = ignore_global(make_state_dict(size_mib))
    times: dict[str, list[float]] = {"store": [], "st_store": []}
    for run in range(runs):
        root, path = work / f"only{run}", work / f"only{run}.safetensors"
        produce = _memoised(sd, root, ignore_global([]))
        produce.key("warm")
        stores = {
            "store": lambda produce=produce: produce("miss"),
            "st_store": lambda path=path: _fsynced_save(sd, path),
        }
        for name in sorted(stores, reverse=run % 2 == 1):
            os.sync()
            times[name].append(timed(stores[name])[0])
        _remove(root)
        path.unlink()
    ours, theirs = statistics.median(times["store"]), statistics.median(times["st_store"])
    what = f"{_size(size_mib)} state_dict of {TENSORS} tensors"
    report(f"store on a miss ({what})", ours, theirs, "safetensors save_file+fsync", "<= 1.15")
    return result("torch.store", f"Store a {what} on a miss", ours=ours, baseline=theirs,
                  baseline_name="safetensors save_file + fsync", kind="max", limit=1.15,
                  note=f"median of {runs}, in rotation")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="state_dict size")
    parser.add_argument("--digest-mib", type=int, default=1024, help="tensor of the first digest")
    parser.add_argument("--dataset-mb", type=int, default=400, help="dataset of train(...) keys")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-store", action="store_true", help="no store/restore timing")
    parser.add_argument("--store-only", action="store_true", help="only the store on a miss")
    parser.add_argument("--tensors", type=int, default=TENSORS, help="tensors in the state_dict")
    args = parser.parse_args()
    globals()["TENSORS"] = args.tensors
    work = Path(tempfile.mkdtemp(prefix="bench-torch-", dir=os.environ.get("BENCH_DIR")))
    try:
        if args.store_only:
            bench_store_only(args.size_mib, args.runs, work)
            return
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
