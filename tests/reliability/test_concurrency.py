"""Concurrency: many processes share one store while gc runs beside them.

Eight processes make fifty calls each on overlapping keys (so some keys are
computed by several processes at once and their refs are written
concurrently), while a ninth runs gc in a loop with a short grace period.
Some calls compute for longer than the grace period, so their arguments stay
unreachable from any ref for a while and only the pending roots keep them.
No call may warn or fail, every value must be right, every computed key must
hit afterwards, and fsck must be clean.

Processes that miss on a key another one is computing wait for its result
(single-flight, ``docs/clusters.md``), and one that takes a lease looks the
call up again under it, so no key is computed twice: every holder here is a
live process of this host, never judged gone.

Counts: ``MEMOSTORE_RELIABILITY_PROCS`` (default 8) and
``MEMOSTORE_RELIABILITY_CALLS`` (calls per process, default 50).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from memostore import Store

from .faultkit import (
    Child,
    child_env,
    env_int,
    figure,
    fsck_problems,
    gc_store,
    leftovers,
    run_child,
    seeded_rng,
    store_listing,
)

# Long enough to cover an object's write, fsync and its ref's publication on a
# loaded 2-core machine (fsync alone took over 100 ms there with 9 processes
# writing); the slow calls compute for longer than this.
GRACE_S = 2.0
KEYS = 60
SLOW_EVERY = 10


def _parse(lines: list[list[str]]) -> list[tuple[int, str]]:
    calls = []
    for parts in lines:
        if parts[0] == "done":
            key, kind, verdict = parts[1].split()
            assert verdict == "ok", f"key {key} returned a wrong value"
            calls.append((int(key), kind))
    return calls


def _check_all_hit(root: Path, store: Path, keys: set[int], name: str) -> None:
    env = child_env(store, {"STRESS_KEYS": ",".join(map(str, sorted(keys)))})
    args = ["0", "0", str(KEYS), str(SLOW_EVERY)]
    lines, _ = run_child("stress_child.py", args, root / f"{name}.txt", env)
    calls = _parse(lines)
    assert {k for k, _ in calls} == keys
    lost = sorted(k for k, kind in calls if kind != "hit")
    assert not lost, f"evaluations lost (recomputed): {lost}"


@pytest.mark.slow
def test_processes_and_gc_share_a_store_without_loss(tmp_path: Path) -> None:
    rng = seeded_rng("concurrency")
    procs = env_int("MEMOSTORE_RELIABILITY_PROCS", 8)
    calls = env_int("MEMOSTORE_RELIABILITY_CALLS", 50)
    store = tmp_path / "store"
    Store(store)
    stop = tmp_path / "stop-gc"
    gc_child = Child(
        "gc_child.py", [str(store), str(GRACE_S), str(stop)], tmp_path / "gc.txt", child_env(store)
    )
    assert gc_child.wait_for("ready")
    started = time.monotonic()
    env = child_env(store)
    workers = [
        Child(
            "stress_child.py",
            [str(rng.randrange(1 << 30)), str(calls), str(KEYS), str(SLOW_EVERY)],
            tmp_path / f"worker-{i}.txt",
            env,
        )
        for i in range(procs)
    ]
    all_calls: list[tuple[int, str]] = []
    for worker in workers:
        rc, output = worker.finish(timeout=600)
        assert rc == 0, f"a worker failed:\n{output[-4000:]}"
        all_calls += _parse(worker.lines())
    elapsed = time.monotonic() - started
    stop.touch()
    rc, output = gc_child.finish(timeout=120)
    assert rc == 0, f"gc failed while the workers ran:\n{output[-4000:]}"
    passes = [p[1].split() for p in gc_child.lines() if p[0] == "pass"]
    calls_of = all_calls
    assert len(calls_of) == procs * calls
    computed = Counter(k for k, kind in calls_of if kind == "miss")
    keys = {k for k, _ in calls_of}
    twice = sorted(k for k, n in computed.items() if n > 1)
    assert not twice, f"keys computed by two processes: {twice}"

    assert not fsck_problems(store)
    found = leftovers(store)
    assert not found["locks"] and not found["lock companions"], found
    assert Store(store).pending_roots() == set()
    _check_all_hit(tmp_path, store, keys, "check")
    # gc with no grace at all frees only garbage: everything still hits.
    before = store_listing(store)
    report = gc_store(store, grace_s=0.0)
    assert not fsck_problems(store)
    _check_all_hit(tmp_path, store, keys, "check-after-gc")
    assert not leftovers(store)["tmp"]
    figure(
        f"concurrency: {procs} processes x {calls} calls on {len(keys)} shared keys "
        f"({sum(computed.values())} computed, {sum(1 for n in computed.values() if n > 1)} keys "
        f"computed by 2+ processes at once, {len(calls_of) - sum(computed.values())} hits) "
        f"in {elapsed:.1f} s with gc running {len(passes)} passes beside them "
        f"({sum(1 for p in passes if p[1] == 'cli')} of them `memostore gc`; grace "
        f"{GRACE_S} s, {sum(int(p[0]) for p in passes)} objects freed): {len(calls_of)} "
        f"concurrent calls without loss or error; fsck clean; every key hits afterwards, "
        f"and again after a gc with no grace at all (which freed {len(report.deleted)} "
        f"unreachable objects of {len(before)} files)"
    )


def test_gc_keeps_old_objects_that_a_writer_reuses(tmp_path: Path) -> None:
    """A writer that finds its objects already present refreshes them for gc.

    The objects of a dropped evaluation are garbage an hour later; a new
    evaluation whose result has the same content reuses them instead of writing
    them again. gc running between that reuse and the new ref's publication
    must not free them.
    """
    store = tmp_path / "store"
    env = child_env(store)
    run_child("crash_child.py", ["small", "7"], tmp_path / "first.txt", env)
    opened = Store(store)
    for name, target in list(opened.refs.iter("evals/")):
        opened.refs.delete_if_equals(name, target)
    an_hour_ago = time.time() - 3600
    for path in (store / "objects").rglob("*"):
        if path.is_file():
            os.utime(path, (an_hour_ago, an_hour_ago))
    go = tmp_path / "go"
    writer = Child(
        "crash_child.py",
        ["small", "7"],
        tmp_path / "second.txt",
        {**env, "RELIABILITY_KILL": "publish-before:1", "RELIABILITY_PAUSE_UNTIL": str(go)},
    )
    assert writer.wait_for("paused")
    report = gc_store(store, grace_s=600)
    go.touch()
    rc, output = writer.finish()
    assert rc == 0, output
    assert not fsck_problems(store), f"gc freed objects the writer reused: {report.deleted}"
    lines, _ = run_child("crash_child.py", ["small", "7"], tmp_path / "third.txt", env)
    assert ["done", "7 hit ok"] in lines
