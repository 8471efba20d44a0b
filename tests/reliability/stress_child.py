"""A child that makes many memoised calls on keys other children use too.

Usage: ``stress_child.py PROGRESS SEED CALLS KEYS SLOW_EVERY`` with
``$MEMOSTORE_DIR`` naming the store (and ``$STRESS_KEYS``, a comma-separated
list, to call those keys instead). Each call picks a key in ``range(KEYS)``,
checks the value against an independent computation and appends
``done KEY hit|miss ok|BAD`` to PROGRESS. One key in SLOW_EVERY computes for
longer than gc's grace period, so that its arguments stay unreachable from any
ref for a while (gc must keep them as pending roots). Any warning or error
makes the child exit with a non-zero status.
"""

from __future__ import annotations

import os
import random
import sys
import time
import warnings

import numpy as np

from memostore import MemostoreWarning, ignore_global, memo


class Tracker:
    """Marks body runs; an ignored global, so that it stays out of the keys."""

    def __init__(self) -> None:
        self.ran: set[int] = set()


TRACKER = ignore_global(Tracker())


def expected(key: int) -> dict:
    return {"key": key, "values": np.arange(key % 97 + 1, dtype=np.float64) / (key + 1)}


@memo
def work(key: int, table: np.ndarray, slow: bool) -> dict:
    TRACKER.ran.add(key)
    # Jitter from the OS, not from the global RNG: a body that draws from the global
    # RNG hits only from the same RNG state, which an unseeded process never has.
    jitter = os.urandom(1)[0] / 255
    time.sleep(2.2 + 0.4 * jitter if slow else 0.01 * jitter)
    return expected(key)


def main() -> None:
    warnings.simplefilter("error", MemostoreWarning)
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rng = random.Random(int(sys.argv[2]))
    calls, keys, slow_every = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    tables = [np.arange(1000 * (i + 1), dtype=np.int32) for i in range(3)]
    # $STRESS_KEYS (comma-separated) replaces the random choice: a check of given keys.
    given = [int(k) for k in os.environ.get("STRESS_KEYS", "").split(",") if k]
    chosen = given or [rng.randrange(keys) for _ in range(calls)]
    os.write(fd, b"ready\n")
    for key in chosen:
        TRACKER.ran.discard(key)
        value = work(key, tables[key % 3], key % slow_every == 0)
        good = value["key"] == key and np.array_equal(value["values"], expected(key)["values"])
        kind = "miss" if key in TRACKER.ran else "hit"
        os.write(fd, f"done {key} {kind} {'ok' if good else 'BAD'}\n".encode())


if __name__ == "__main__":
    main()
