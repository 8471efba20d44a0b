"""@memo against joblib.Memory, and blob writes against a plain write + fsync.

Run: python benchmarks/bench_memo.py [--blob-mib 1024]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_time, report


def _work(x, y=2):
    return x + y


def bench_hit_overhead(root: Path, calls: int = 20_000) -> dict:
    import joblib

    from memostore import Store, memo

    ours = memo(store=Store(root / "ms"))(_work)
    theirs = joblib.Memory(str(root / "joblib"), verbose=0).cache(_work)
    ours(1)
    theirs(1)

    def per_call(fn) -> float:
        def loop():
            for _ in range(calls):
                fn(1)

        return median_time(loop, repeat=5) / calls

    return report(
        "hit overhead per call, tiny arguments",
        per_call(ours),
        per_call(theirs),
        "joblib.Memory",
        "<= 0.5x",
        unit="us",
    )


def bench_blob_write(root: Path, mib: int) -> dict:
    import numpy as np

    from memostore.object_store import DiskObjectStore

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

    t_plain = median_time(plain, repeat=5)
    t_ours = median_time(ours, repeat=5)
    return report(
        f"write a {mib} MiB blob (hash + fsync + rename)",
        t_ours,
        t_plain,
        "write + fsync",
        "<= 1.3x",
    )


def main() -> list[dict]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blob-mib", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        return [bench_hit_overhead(root), bench_blob_write(root, args.blob_mib)]


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"done in {time.time() - started:.0f} s")
