"""Timings of the store lifecycle commands on a generated store with many evaluations.

Builds a store of N evaluations (default 10,000) the way ``bench_cli.py`` does
(arguments, code and result documents, an evaluation record and its ref; a
large blob every 1,000 results; chains of parents), then measures, each in its
own function:

- ``memostore du`` before the links cache exists (it reads every document once
  and builds the cache): no target, the one-time cost;
- ``memostore du`` and ``du --json`` with the cache: target < 1 s;
- ``compute_usage`` in this process (no interpreter start): supporting figure.

The console script runs as a subprocess with output piped; wall and CPU time
(user + system of the child) are both printed, as on a busy machine wall time
mostly measures the other processes. Run from the repository root::

    python benchmarks/bench_lifecycle.py
    python benchmarks/bench_lifecycle.py --count 2000 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import result
from bench_cli import build_store, existing_ids, timed

DU_TARGET_S = 1.0


def _links_cache(root: Path) -> Path:
    return root / "index" / "links"


def measure_du_first(root: Path, runs: int) -> None:
    """``du`` with no links cache: every document is read once and the cache written."""

    def drop_cache() -> None:
        _links_cache(root).unlink(missing_ok=True)

    wall, cpu = timed(["--store", str(root), "du"], runs, drop_cache)
    print(f"{'du (no links cache yet)':34s} {wall * 1000:6.0f} ms wall  {cpu * 1000:6.0f} ms cpu")
    result(
        "lifecycle.du_first",
        "du, no links cache yet (reads every document once, builds the cache)",
        ours=wall,
        kind="info",
        note=f"CPU {cpu:.2f} s",
    )


def measure_du(root: Path, runs: int, count: int) -> None:
    """``du`` and ``du --json`` with the links cache in place."""
    timed(["--store", str(root), "du"], 1)  # the cache is complete after this run
    for key, argv, name in (
        ("lifecycle.du", ["du"], f"du, {count} evaluations"),
        ("lifecycle.du_json", ["du", "--json"], f"du --json, {count} evaluations"),
    ):
        wall, cpu = timed(["--store", str(root), *argv], runs)
        verdict = "ok" if wall < DU_TARGET_S else "SLOW"
        print(
            f"{' '.join(argv):34s} {wall * 1000:6.0f} ms wall  {cpu * 1000:6.0f} ms cpu"
            f"   (target {DU_TARGET_S * 1000:.0f} ms: {verdict})"
        )
        result(
            key,
            name,
            ours=wall,
            kind="below",
            limit=DU_TARGET_S,
            note=f"CPU {cpu:.2f} s; subprocess, interpreter start included",
        )


def measure_compute_usage(root: Path, runs: int) -> None:
    """``compute_usage`` alone (CPU time), each run in a fresh interpreter: no parsed
    cache carried over, no CLI start-up."""
    code = (
        "import time, sys\n"
        "from memostore.odb.store import Store\n"
        "from memostore.lifecycle.usage import compute_usage\n"
        "store = Store(sys.argv[1])\n"
        "start = time.process_time()\n"
        "compute_usage(store)\n"
        "print(time.process_time() - start)\n"
    )
    times = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
        )
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    median = statistics.median(times)
    print(f"{'compute_usage (CPU, in process)':34s} {median * 1000:6.0f} ms cpu")
    result(
        "lifecycle.compute_usage",
        "compute_usage alone, CPU time (a fresh interpreter each run)",
        ours=median,
        kind="info",
    )


EVICT_TARGET_S = 10.0


def measure_evict_half(objects: int) -> None:
    """``gc --max-size`` (in process) evicting a store of *objects* objects to half its size.

    The store (4 objects per evaluation, as ``build_store`` writes them) is built
    on tmpfs, where fsync costs nothing, then copied to the disk measured.
    """
    from memostore.lifecycle.eviction import EvictionPolicy, evict
    from memostore.lifecycle.usage import compute_usage
    from memostore.odb.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="memostore-bench-evict-"))
    fast = "/dev/shm" if Path("/dev/shm").is_dir() else None
    shm = Path(tempfile.mkdtemp(prefix="memostore-bench-evict-", dir=fast))
    try:
        built = shm / "store"
        build_store(built, objects // 4, 0)
        root = tmp / "store"
        shutil.copytree(built, root, symlinks=True)
        floor_root = tmp / "floor"
        shutil.copytree(built, floor_root, symlinks=True)
        shutil.rmtree(shm, ignore_errors=True)
        os.sync()  # neither copy's writeback competes with the timed deletions
        usage = compute_usage(Store(root))
        before, count = usage.total_bytes, len(usage.object_sizes)
        start, cpu = time.perf_counter(), time.process_time()
        report = evict(Store(root), EvictionPolicy(max_size=before // 2), grace_s=0)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = compute_usage(Store(root)).total_bytes
        gone = report.gc.deleted if report.gc is not None else []
        refs = [name for e in report.evicted for name in e.refs]
        floor = _unlink_floor(floor_root, gone, refs)
        verdict = "ok" if wall < EVICT_TARGET_S else "SLOW"
        print(
            f"{'gc --max-size (half the store)':34s} {wall * 1000:6.0f} ms wall  "
            f"{cpu * 1000:6.0f} ms cpu   (target {EVICT_TARGET_S:.0f} s: {verdict}); "
            f"{len(report.evicted)} evaluations, {len(gone)} of {count} objects deleted, "
            f"{before} -> {after} bytes; unlinking the same files alone: {floor:.2f} s "
            f"({wall / floor:.1f}x)"
        )
        result(
            "lifecycle.evict_half",
            f"gc --max-size: evict a store of {count:,} objects to half its size",
            ours=wall,
            kind="below",
            limit=EVICT_TARGET_S,
            note=f"CPU {cpu:.2f} s; {len(report.evicted)} evaluations evicted, "
            f"{len(gone):,} objects deleted; {after:,} of {before:,} bytes left",
        )
        result(
            "lifecycle.evict_floor",
            "eviction against unlinking the same object and ref files alone "
            f"({_FLOOR_THREADS} threads, no checks)",
            ours=wall,
            baseline=floor,
            baseline_name="os.unlink of the same files",
            kind="info",
            note="the disk's own cost of deleting those files bounds any eviction",
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


_FLOOR_THREADS = 16


def _unlink_floor(root: Path, object_ids: list[str], ref_names: list[str]) -> float:
    """Seconds to unlink, in a copy of the store at *root*, the files eviction deleted:
    the objects and refs alone, several threads at a time, nothing read or checked."""
    paths = [f"{root}/objects/{i[:2]}/{i[2:]}" for i in object_ids]
    paths += [f"{root}/refs/{name}" for name in ref_names]

    def unlink(batch: list[str]) -> None:
        for path in batch:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    batches = [paths[i : i + 64] for i in range(0, len(paths), 64)]
    start = time.perf_counter()
    with ThreadPoolExecutor(_FLOOR_THREADS) as pool:
        list(pool.map(unlink, batches))
    return time.perf_counter() - start


def measure_store_hook(runs: int) -> None:
    """What the size-limit trigger adds to a stored miss (``trigger.after_store``)."""
    from memostore.lifecycle import settings, trigger
    from memostore.odb.store import Store

    tmp = tempfile.mkdtemp(prefix="memostore-bench-trigger-")
    try:
        store = Store(Path(tmp) / "store")
        n = 200_000
        start = time.perf_counter()
        for _ in range(n):
            trigger.after_store(store)  # the first call checks; the rest are throttled
        per_call = (time.perf_counter() - start) / n
        checks = []
        for _ in range(runs):
            trigger._checked.clear()
            start = time.perf_counter()
            trigger.after_store(store)
            checks.append(time.perf_counter() - start)
        settings.set_setting(store, "max-size", "100G")
        spawns = []
        for _ in range(runs):
            trigger._checked.clear()
            (Path(tmp) / "store" / "logs" / "evict.check").unlink(missing_ok=True)
            start = time.perf_counter()
            trigger.after_store(store)  # starts the (detached) enforcer
            spawns.append(time.perf_counter() - start)
        check, spawn = statistics.median(checks), statistics.median(spawns)
        print(
            f"{'store hook (per stored miss)':34s} {per_call * 1e6:6.2f} us; once a minute: "
            f"{check * 1e6:.0f} us with no limit set, {spawn * 1e3:.2f} ms starting the enforcer"
        )
        result(
            "lifecycle.store_hook",
            "size-limit trigger on a stored miss (throttled call)",
            ours=per_call * 1e6,
            kind="info",
            unit="us",
            note=f"once a minute per process: {check * 1e6:.0f} us (no limit), "
            f"{spawn * 1e3:.2f} ms (limit set: starts the detached enforcer)",
        )
        time.sleep(2)  # let the enforcers started above finish before the store goes
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="build the store here and keep it (reused when present)",
    )
    parser.add_argument(
        "--evict-objects",
        type=int,
        default=100_000,
        help="objects in the store that gc --max-size evicts to half its size",
    )
    args = parser.parse_args()
    tmp = None
    root = args.store
    if root is None:
        tmp = tempfile.mkdtemp(prefix="memostore-bench-lifecycle-")
        root = Path(tmp) / "store"
    try:
        if (root / "FORMAT").exists():
            count = len(existing_ids(root))
            print(f"reusing the {count} evaluations at {root}")
        else:
            start = time.perf_counter()
            count = len(build_store(root, args.count, 1000))
            print(f"built {count} evaluations in {time.perf_counter() - start:.1f}s at {root}")
        measure_du_first(root, max(1, min(args.runs, 2)))
        measure_du(root, args.runs, count)
        measure_compute_usage(root, args.runs)
        measure_store_hook(args.runs)
        measure_evict_half(args.evict_objects)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
