"""push and pull against the plain tools a user would otherwise run.

1. **New data.** A memoised function returns ``--tensors`` tensors totalling
   ``--total-mib`` (default 64 x 16 MiB = 1 GiB), stored in a fresh store. Then:

   - ``memostore push`` to a directory remote on the store's file system (the
     default: object files hard-linked; and with copies, ``hardlinks=False``,
     durable with ``fsync=True`` or not with ``fsync=False``) vs ``cp -r`` of
     the store's ``objects/`` (and ``cp -r && sync``, the durable equivalent);
   - ``push`` to a ``moto_server`` on 127.0.0.1 vs plain boto3
     ``upload_file`` (multipart, same TransferConfig) of the same object files,
     one after the other, and from the same number of threads as the push.

2. **Nothing to transfer.** A store of ``--objects`` objects (default 10,000:
   500 evaluations of 20 objects) pushed once; then a push and a pull that
   find everything up to date, against both remotes.

Medians of ``--runs`` runs, the candidates of each comparison run in rotation;
the page cache is flushed (``sync``) before each run.
Run from the repository root::

    python benchmarks/bench_remote.py
    python benchmarks/bench_remote.py --total-mib 256 --skip-s3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

from memostore import Store, memo  # noqa: E402
from memostore.odb.objects import KIND_EVALUATION, KIND_TREE, Doc, Links  # noqa: E402
from memostore.records.evaluation import eval_ref_name  # noqa: E402
from memostore.remote import pull, push  # noqa: E402
from memostore.transport import DirectoryTransport, S3Transport  # noqa: E402

MiB = 1024 * 1024
JOBS = 8


def timed(setup: Callable[[], object], run: Callable[[], object], runs: int) -> float:
    """Median seconds of *run* over *runs* runs, *setup* (untimed) and ``sync`` before each."""
    return compare(setup, {"run": run}, runs)["run"]


def compare(
    setup: Callable[[], object], candidates: dict[str, Callable[[], object]], runs: int
) -> dict[str, float]:
    """Median seconds of each candidate, run in rotation (one of each per round).

    Rotating, rather than timing one candidate's runs back to back, spreads any
    load from other processes over all candidates alike.
    """
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(runs):
        for name, run in candidates.items():
            setup()
            subprocess.run(["sync"], check=False)
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def line(label: str, seconds: float, total: int, base: float | None) -> None:
    ratio = f"{seconds / base:5.2f}x" if base else "  base"
    rate = f"{total / seconds / 1e6:7.0f} MB/s" if total else " " * 12
    print(f"  {label:<56} {seconds:7.3f} s {rate}  {ratio}", flush=True)


def _lines(times: dict[str, float], total: int) -> None:
    """One line per candidate; the first is the baseline of the ratios."""
    first = next(iter(times))
    for label, seconds in times.items():
        line(label, seconds, total, None if label == first else times[first])


# -- stores ------------------------------------------------------------------------------------
def tensor_store(root: Path, count: int, total: int) -> Store:
    """A store holding one evaluation whose result is *count* new float32 tensors."""
    import torch

    store = Store(root)
    numel = total // count // 4

    @memo(store=store)
    def make(count: int, numel: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        return {f"t{i:03d}": torch.randn(numel, generator=gen) for i in range(count)}

    make(count, numel)
    return store


def many_objects_store(root: Path, objects: int) -> Store:
    """*objects* objects: evaluations of one tree linking 18 small blobs each."""
    store = Store(root)
    per = 20
    for e in range(objects // per):
        blobs = {store.objects.add_bytes(f"{e}:{b}".encode() * 64) for b in range(per - 2)}
        tree = Doc(KIND_TREE, {"n": e}, Links(blobs=blobs))
        store.objects.add_doc(tree)
        key = f"{e:064x}"
        evaluation = Doc(KIND_EVALUATION, {"function": "bench:f", "key": key}, Links({tree.id}))
        store.objects.add_doc(evaluation)
        store.refs.set(eval_ref_name("bench:f", key), evaluation.id)
    store.objects.sync()
    return store


def object_files(store: Store) -> list[Path]:
    return [p for p in (store.root / "objects").rglob("*") if p.is_file()]


# -- 1. new data ------------------------------------------------------------------------------
def bench_directory(store: Store, work: Path, runs: int) -> None:
    files = object_files(store)
    total = sum(p.stat().st_size for p in files)
    dest = work / "dest"

    def clear() -> None:
        shutil.rmtree(dest, ignore_errors=True)

    def cp() -> None:
        subprocess.run(["cp", "-r", str(store.root / "objects"), str(dest)], check=True)

    def cp_sync() -> None:
        cp()
        subprocess.run(["sync"], check=True)

    def push_dir(**options: bool) -> Callable[[], None]:
        return lambda: push(store, DirectoryTransport(dest, **options), jobs=JOBS)

    print(f"push to a directory remote: {len(files)} objects, {total / MiB:.0f} MiB")
    t = compare(
        clear,
        {
            "cp -r objects/ (page cache, not durable)": cp,
            "cp -r objects/ && sync (durable)": cp_sync,
            f"memostore push, hard links (default), {JOBS} jobs": push_dir(),
            f"memostore push, copies, fsync=False, {JOBS} jobs": push_dir(
                hardlinks=False, fsync=False
            ),
            f"memostore push, copies, fsync=True, {JOBS} jobs": push_dir(hardlinks=False),
        },
        runs,
    )
    _lines(t, total)
    clear()


def bench_s3(store: Store, runs: int, noop_store: Store) -> None:
    import boto3
    from s3server import DUMMY_AWS_ENV, MotoServer

    os.environ.update(DUMMY_AWS_ENV)
    files = object_files(store)
    total = sum(p.stat().st_size for p in files)
    with MotoServer() as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        transport = S3Transport("bench", "store", endpoint_url=endpoint)
        config = transport.transfer_config

        def clear() -> None:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench"):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
                if keys:
                    client.delete_objects(Bucket="bench", Delete={"Objects": keys})

        def upload(p: Path) -> None:
            client.upload_file(str(p), "bench", f"plain/{p.name}", Config=config)

        def plain() -> None:
            for p in files:
                upload(p)

        def plain_threads() -> None:
            with ThreadPoolExecutor(JOBS) as pool:
                list(pool.map(upload, files))

        print(f"push to S3 (moto_server on 127.0.0.1): {len(files)} objects, {total / MiB:.0f} MiB")
        t = compare(
            clear,
            {
                "boto3 upload_file, one file after another": plain,
                f"boto3 upload_file, {JOBS} threads": plain_threads,
                f"memostore push, {JOBS} jobs": lambda: push(store, transport, jobs=JOBS),
            },
            runs,
        )
        _lines(t, total)
        clear()

        print(f"nothing to transfer, S3, store of {_count(noop_store)} objects")
        push(noop_store, transport, jobs=JOBS)
        pulled = Store(Path(tempfile.mkdtemp(prefix="bench-pulled-")))
        pull(pulled, transport, jobs=JOBS)
        line(
            "push (up to date)",
            timed(_noop, lambda: _up(push(noop_store, transport)), runs),
            0,
            None,
        )
        line("pull (up to date)", timed(_noop, lambda: _up(pull(pulled, transport)), runs), 0, None)
        shutil.rmtree(pulled.root)
        clear()
        transport.close()
        client.close()


# -- 2. nothing to transfer --------------------------------------------------------------------
def _noop() -> None:
    return None


def _up(report: object) -> None:
    assert getattr(report, "up_to_date", False), report


def _count(store: Store) -> int:
    return sum(1 for _ in store.objects.iter_ids())


def bench_noop_directory(store: Store, work: Path, runs: int) -> None:
    remote = work / "noop-remote"
    push(store, str(remote), jobs=JOBS)
    pulled = Store(work / "noop-pulled")
    pull(pulled, str(remote), jobs=JOBS)
    print(f"nothing to transfer, directory remote, store of {_count(store)} objects")
    line("push (up to date)", timed(_noop, lambda: _up(push(store, str(remote))), runs), 0, None)
    line("pull (up to date)", timed(_noop, lambda: _up(pull(pulled, str(remote))), runs), 0, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="size of new data (1024)")
    parser.add_argument("--tensors", type=int, default=64, help="number of tensors (64)")
    parser.add_argument("--objects", type=int, default=10_000, help="no-op store size (10000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (3)")
    parser.add_argument("--skip-s3", action="store_true", help="only the directory remote")
    parser.add_argument("--skip-dir", action="store_true", help="only the S3 remote")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        work = Path(tmp)
        store = tensor_store(work / "store", args.tensors, args.total_mib * MiB)
        noop_store = many_objects_store(work / "many", args.objects)
        if not args.skip_dir:
            bench_directory(store, work, args.runs)
            bench_noop_directory(noop_store, work, args.runs)
        if not args.skip_s3:
            bench_s3(store, args.runs, noop_store)


if __name__ == "__main__":
    main()
