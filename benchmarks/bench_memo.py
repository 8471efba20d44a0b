"""@memo against joblib.Memory, and blob writes against a plain write + fsync.

Run: python benchmarks/bench_memo.py [--blob-mib 1024] [--calls 20000] [--repeat 5]
[--list-items 5000000]
     python benchmarks/bench_memo.py --only miss     # the tiny miss alone

A tiny miss (a new small argument each call, fsync on: one barrier for the
call's objects, one fsync of its ref) is timed against joblib.Memory's miss,
which does not fsync at all.

Hit overhead is measured twice: in this process with the store passed to
``@memo``, and as a user runs it, in a script of its own with ``$MEMOSTORE_DIR``
set and the function defined in the script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, result, rotate


def _work(x, y=2):
    return x + y


def bench_hit_overhead(root: Path, calls: int = 20_000, repeat: int = 5) -> dict:
    import joblib

    from memostore import Store, memo

    ours = memo(store=Store(root / "ms"))(_work)
    theirs = joblib.Memory(str(root / "joblib"), verbose=0).cache(_work)
    ours(1)
    theirs(1)

    def loop(fn):
        def run() -> None:
            for _ in range(calls):
                fn(1)

        return run

    # Both candidates in rotation, so that other load on the machine hits both alike.
    times = rotate({"ours": loop(ours), "joblib": loop(theirs)}, repeat)
    ours_us, theirs_us = times["ours"] / calls * 1e6, times["joblib"] / calls * 1e6
    report(
        "hit overhead per call, tiny arguments",
        ours_us / 1e6,
        theirs_us / 1e6,
        "joblib.Memory",
        "<= 0.4x",
        unit="us",
    )
    return result(
        "memo.hit_overhead",
        "Hit with tiny arguments, warm process: time per call",
        ours=ours_us,
        baseline=theirs_us,
        baseline_name="joblib.Memory",
        unit="us",
        kind="max",
        limit=0.4,
        note=f"median of {repeat} rounds of {calls} calls",
    )


# A user's script: the function defined in it, the store from $MEMOSTORE_DIR. It times
# both candidates in rotation and prints the median time per call of each, in us.
USER_SCRIPT = """
import json, os, statistics, sys, time
import joblib
from memostore import memo

calls, repeat = int(sys.argv[1]), int(sys.argv[2])


@memo
def work(x, y=2):
    return x + y


def plain(x, y=2):
    return x + y


theirs = joblib.Memory(os.environ["JOBLIB_DIR"], verbose=0).cache(plain)
work(1)
theirs(1)
times = {"ours": [], "joblib": []}
for _ in range(repeat):
    for name, fn in (("ours", work), ("joblib", theirs)):
        start = time.perf_counter()
        for _ in range(calls):
            fn(1)
        times[name].append((time.perf_counter() - start) / calls * 1e6)
print(json.dumps({name: statistics.median(values) for name, values in times.items()}))
"""


def bench_hit_overhead_script(root: Path, calls: int = 20_000, repeat: int = 5) -> dict:
    script = root / "user_script.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    env = {**os.environ, "MEMOSTORE_DIR": str(root / "ms-env"), "JOBLIB_DIR": str(root / "jl")}
    proc = subprocess.run(
        [sys.executable, str(script), str(calls), str(repeat)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(root),
        check=True,
    )
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    ours_us, theirs_us = times["ours"], times["joblib"]
    report(
        "hit overhead per call, tiny arguments, a script with $MEMOSTORE_DIR",
        ours_us / 1e6,
        theirs_us / 1e6,
        "joblib.Memory",
        "<= 0.4x",
        unit="us",
    )
    return result(
        "memo.hit_overhead_script",
        "Hit with tiny arguments as a user runs it ($MEMOSTORE_DIR set, the function "
        "defined in the script): time per call",
        ours=ours_us,
        baseline=theirs_us,
        baseline_name="joblib.Memory",
        unit="us",
        kind="max",
        limit=0.4,
        note=f"median of {repeat} rounds of {calls} calls, in a script of its own",
    )


def bench_key_plain_list(root: Path, items: int, repeat: int = 3) -> dict:
    """Keying ``f(list(range(N)))`` against what pickling and hashing the list costs."""
    import pickle

    from blake3 import blake3

    from memostore import Store, memo

    value = list(range(items))
    keyed = memo(store=Store(root / "ms-key"))(_work)

    def theirs() -> None:
        blake3(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()

    times = rotate({"ours": lambda: keyed.key(value), "pickle": theirs}, repeat)
    report(
        f"key f(list(range({items:,})))",
        times["ours"],
        times["pickle"],
        "pickle.dumps + blake3",
        "<= 2x",
    )
    return result(
        "memo.key_plain_list",
        f"Key of a call whose argument is a plain list of {items:,} ints",
        ours=times["ours"],
        baseline=times["pickle"],
        baseline_name="pickle.dumps + blake3",
        kind="max",
        limit=2.0,
        note=f"median of {repeat}",
    )


def bench_tiny_miss(root: Path, calls: int = 50, repeat: int = 5) -> dict:
    import joblib

    from memostore import Store, memo

    ours = memo(store=Store(root / "miss-ms"))(_work)
    theirs = joblib.Memory(str(root / "miss-joblib"), verbose=0).cache(_work)
    ours(-1)
    theirs(-1)
    fresh = iter(range(10**9))

    def loop(fn):
        def run() -> None:
            for _ in range(calls):
                fn(next(fresh))  # a new argument: always a miss

        return run

    times = rotate({"ours": loop(ours), "joblib": loop(theirs)}, repeat)
    ours_ms, theirs_ms = times["ours"] / calls * 1e3, times["joblib"] / calls * 1e3
    report("tiny miss per call", ours_ms / 1e3, theirs_ms / 1e3, "joblib.Memory", "<= 5x")
    return result(
        "memo.tiny_miss",
        "Miss with tiny arguments and result, fsync on: time per call",
        ours=ours_ms,
        baseline=theirs_ms,
        baseline_name="joblib.Memory (no fsync)",
        unit="ms",
        kind="max",
        limit=5.0,
        note=f"median of {repeat} rounds of {calls} calls",
    )


def bench_blob_write(root: Path, mib: int, repeat: int = 5) -> dict:
    import numpy as np

    from memostore.odb.object_store import DiskObjectStore

    data = np.random.default_rng(0).integers(0, 255, size=mib << 20, dtype=np.uint8)
    view = memoryview(data)
    counter = iter(range(10**9))

    def plain() -> None:
        path = root / f"plain-{next(counter)}"
        with open(path, "wb") as f:
            f.write(view)
            f.flush()
            os.fsync(f.fileno())
        path.unlink()

    def ours() -> None:
        objects = DiskObjectStore(root / f"store-{next(counter)}")
        object_id = objects.add_chunks([view], view.nbytes)
        objects.sync()
        objects.delete(object_id)

    times = rotate({"plain": plain, "ours": ours}, repeat)
    t_plain, t_ours = times["plain"], times["ours"]
    report(
        f"write a {mib} MiB blob (hash + fsync + rename)",
        t_ours,
        t_plain,
        "write + fsync",
        "<= 1.3x",
    )
    return result(
        "memo.blob_write",
        f"Write a {_size(mib)} blob into the store (hash, fsync, rename)",
        ours=t_ours,
        baseline=t_plain,
        baseline_name="write + fsync of a file",
        kind="max",
        limit=1.3,
        note=f"median of {repeat}",
    )


def _size(mib: int) -> str:
    return f"{mib >> 10} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib} MiB"


def main() -> list[dict]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blob-mib", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=20_000, help="hits per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of each measurement")
    parser.add_argument("--list-items", type=int, default=5_000_000, help="items of the keyed list")
    parser.add_argument("--only", choices=["miss"], help="run one measurement alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        if args.only == "miss":
            return [bench_tiny_miss(root, repeat=args.repeat)]
        return [
            bench_tiny_miss(root, repeat=args.repeat),
            bench_hit_overhead(root, args.calls, args.repeat),
            bench_hit_overhead_script(root, args.calls, args.repeat),
            bench_key_plain_list(root, args.list_items, min(args.repeat, 3)),
            bench_blob_write(root, args.blob_mib, args.repeat),
        ]


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"done in {time.time() - started:.0f} s")
