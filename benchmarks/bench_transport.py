"""Transport throughput against the plain tools a user would otherwise run.

Writes N files (default 200 x ~5 MiB = 1 GiB) into a temporary directory, then:

- directory remote: ``add_if_new`` / ``put_file`` of every file into a
  DirectoryTransport (with and without fsync) vs ``cp -r`` of the same
  directory (and ``cp -r`` followed by ``sync``, the durable equivalent);
- S3 remote (a ``moto_server`` on 127.0.0.1): ``put_file`` / ``add_if_new`` of
  every file vs plain boto3 ``upload_file`` with the same TransferConfig.

Prints the median of ``--runs`` runs of each, in seconds and MB/s, and the
ratio to the baseline. Run from the repository root::

    python benchmarks/bench_transport.py               # 1 GiB
    python benchmarks/bench_transport.py --total-mib 256 --skip-s3
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
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from _common import result  # noqa: E402

from memostore.transport import DirectoryTransport, S3Transport  # noqa: E402

MiB = 1024 * 1024


def make_files(root: Path, count: int, total: int) -> list[Path]:
    """*count* files of about total/count bytes each, with distinct content."""
    root.mkdir(parents=True)
    size = total // count
    block = os.urandom(MiB)
    paths = []
    for i in range(count):
        path = root / f"{i:04d}.bin"
        with open(path, "wb") as f:
            f.write(i.to_bytes(8, "little"))
            written = 8
            while written < size:
                n = min(len(block), size - written)
                f.write(block[:n])
                written += n
        paths.append(path)
    return paths


def timed(setup: Callable[[], None], run: Callable[[], None], runs: int) -> float:
    """Median seconds of *run* over *runs* runs, calling *setup* (untimed) before each."""
    times = []
    for _ in range(runs):
        setup()
        subprocess.run(["sync"], check=False)  # start each run with no dirty pages
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(
    label: str, seconds: float, total: int, baseline: float | None, base_name: str = ""
) -> None:
    """One readable line; against a baseline, also a ``RESULT`` line (no target of its own)."""
    ratio = f"{seconds / baseline:5.2f}x" if baseline else "  base"
    print(f"  {label:<50} {seconds:7.2f} s  {total / seconds / 1e6:7.0f} MB/s  {ratio}")
    if baseline:
        slug = "".join(c if c.isalnum() else "_" for c in label.lower()).strip("_")
        result(
            f"transport.{slug}",
            f"{label}, {total / MiB:.0f} MiB",
            ours=seconds,
            baseline=baseline,
            baseline_name=base_name,
            kind="info",
            note="the transport alone, without push's bookkeeping",
        )


def bench_directory(files: list[Path], src: Path, work: Path, runs: int) -> None:
    total = sum(p.stat().st_size for p in files)
    dest = work / "dest"

    def clear() -> None:
        shutil.rmtree(dest, ignore_errors=True)

    def cp() -> None:
        subprocess.run(["cp", "-r", str(src), str(dest)], check=True)

    def cp_sync() -> None:
        cp()
        subprocess.run(["sync"], check=True)

    def with_transport(method: str, fsync: bool, threads: int = 1) -> Callable[[], None]:
        def run() -> None:
            t = DirectoryTransport(dest, fsync=fsync)

            def send(p: Path) -> None:
                getattr(t, method)(f"objects/{p.name[:2]}/{p.name}", p)

            if threads == 1:
                for p in files:
                    send(p)
            else:
                # Each fsync waits for its own file's writeback; threads overlap them.
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(send, files))

        return run

    print(f"directory remote, {len(files)} files, {total / MiB:.0f} MiB, median of {runs}:")
    base = timed(clear, cp, runs)
    report("cp -r", base, total, None)
    report("cp -r && sync", timed(clear, cp_sync, runs), total, base, "cp -r")
    for method in ("add_if_new", "put_file"):
        for fsync in (True, False):
            label = f"DirectoryTransport.{method} (fsync={fsync})"
            seconds = timed(clear, with_transport(method, fsync), runs)
            report(label, seconds, total, base, "cp -r")
    label = "DirectoryTransport.add_if_new (fsync, 4 threads)"
    seconds = timed(clear, with_transport("add_if_new", True, 4), runs)
    report(label, seconds, total, base, "cp -r")
    clear()


def bench_s3(files: list[Path], runs: int) -> None:
    import boto3
    from s3server import DUMMY_AWS_ENV, MotoServer

    os.environ.update(DUMMY_AWS_ENV)
    total = sum(p.stat().st_size for p in files)
    server = MotoServer()
    endpoint = server.start()
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        transport = S3Transport("bench", "store", endpoint_url=endpoint)
        config = transport.transfer_config

        def clear() -> None:
            # moto holds objects in memory: empty the bucket between runs.
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench"):
                for item in page.get("Contents", ()):
                    client.delete_object(Bucket="bench", Key=item["Key"])

        def plain() -> None:
            for p in files:
                client.upload_file(str(p), "bench", f"plain/{p.name}", Config=config)

        def with_transport(method: str, threads: int = 1) -> Callable[[], None]:
            def send(p: Path) -> None:
                getattr(transport, method)(f"objects/{p.name[:2]}/{p.name}", p)

            def run() -> None:
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(send, files))

            return run

        print(
            f"S3 remote (moto_server on 127.0.0.1), {len(files)} files, "
            f"{total / MiB:.0f} MiB, median of {runs}:"
        )
        base = timed(clear, plain, runs)
        report("boto3 upload_file (same TransferConfig)", base, total, None)
        name = "boto3 upload_file"
        for method in ("put_file", "add_if_new"):
            seconds = timed(clear, with_transport(method), runs)
            report(f"S3Transport.{method}", seconds, total, base, name)
        # A push can send several objects at once; the transport is thread-safe.
        label = "S3Transport.add_if_new, 4 threads"
        report(label, timed(clear, with_transport("add_if_new", 4), runs), total, base, name)
        clear()
        transport.close()
        client.close()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="total size (default 1024)")
    parser.add_argument("--files", type=int, default=200, help="number of files (default 200)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (default 3)")
    parser.add_argument("--skip-s3", action="store_true", help="only the directory remote")
    parser.add_argument("--skip-dir", action="store_true", help="only the S3 remote")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp:
        work = Path(tmp)
        src = work / "src"
        files = make_files(src, args.files, args.total_mib * MiB)
        if not args.skip_dir:
            bench_directory(files, src, work, args.runs)
        if not args.skip_s3:
            bench_s3(files, args.runs)


if __name__ == "__main__":
    main()
