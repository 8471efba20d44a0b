"""Storing and restoring PyTorch values, against safetensors, plus deduplication.

Measures, each as the median of ``--runs`` runs:

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
4. **Repeated digest** of unchanged values (a module holding 1,000 tensors, a
   100 MB dataset and its random split): independent of byte size.

A restored blob is memory-mapped and checked against its id on a background
thread (``torch_codecs/checks.py``); the restore is also timed with the check
done before returning (``eager``). The per-process record of checked blobs is
cleared before each timed restore, as in a fresh process. Run from the repository root::

    python benchmarks/bench_torch_store.py                 # 1 GiB
    python benchmarks/bench_torch_store.py --size-mib 256 --runs 3
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

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report

from memostore import memo
from memostore.encoding import Encoder, HashSink
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


def bench_store_restore(size_mib: int, runs: int, work: Path) -> list[dict]:
    sd = make_state_dict(size_mib)
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
            elapsed, restored = timed(lambda produce=produce: produce("miss"))
            checks.wait_for_checks()
            assert torch.equal(restored["layer7.weight"], sd["layer7.weight"])
            times[name].append(elapsed)
        checks.set_check_mode("background")
        checks.forget_verified()
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
        times["st_load"].append(timed(lambda path=path: load_file(str(path)))[0])
        times["st_touch"].append(timed(lambda path=path: touch_all(load_file(str(path))))[0])
        path.unlink()

    med = {k: statistics.median(v) for k, v in times.items()}
    label = f"{size_mib} MiB state_dict, {TENSORS} tensors"
    return [
        report(f"store on a miss ({label})", med["store"], med["st_store"],
               "safetensors save_file+fsync", "<= 1.5"),
        report(f"restore on a hit ({label})", med["load"], med["st_load"],
               "safetensors load_file", "<= 1.2"),
        report(f"restore on a hit, eager check ({label})", med["eager"], med["st_load"],
               "safetensors load_file", "(no target)"),
        report(f"restore + read every byte ({label})", med["touch"], med["st_touch"],
               "safetensors load_file + read", "<= 1.2"),
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
    held = tree_bytes(root / "objects")
    ratio = held / unique
    print(
        f"dedup (10 results x 10 Linear(1000,1000), 9 shared): store holds {held / 1e6:.1f} MB "
        f"for {unique / 1e6:.1f} MB unique, ratio {ratio:.3f} (target <= 1.15)"
    )
    shutil.rmtree(root)
    return {"name": "dedup", "ours": held, "theirs": unique, "ratio": ratio}


def bench_repeated_digest(runs: int) -> None:
    def repeated(name: str, value: Any) -> None:
        Encoder(HashSink()).encode_value(value)  # first digest fills the caches
        times = []
        for _ in range(max(runs, 5) * 4):
            elapsed, _ = timed(lambda: Encoder(HashSink()).encode_value(value))
            times.append(elapsed)
        print(f"repeated digest, {name}: median {statistics.median(times) * 1e3:.3f} ms")

    module = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(500)])
    repeated("module of 500 Linear layers (1,000 tensors)", module)
    data = torch.utils.data.TensorDataset(torch.randn(100_000, 250), torch.arange(100_000))
    repeated("TensorDataset of 100 MB", data)
    split = torch.utils.data.random_split(data, [0.9, 0.1])[0]
    repeated("Subset of it (90,000 indices)", split)
    many = torch.utils.data.TensorDataset(*[torch.randn(64) for _ in range(1000)])
    repeated("TensorDataset of 1,000 tensors", many)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-store", action="store_true", help="dedup and digests only")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-torch-"))
    try:
        if not args.skip_store:
            bench_store_restore(args.size_mib, args.runs, work)
        bench_dedup(work)
        bench_repeated_digest(args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
