"""Lock files survive holders that die: stale locks are recognised by pid, host and age.

On one host a lock whose holder's pid is gone, or now belongs to a process
started after the lock was taken (a reused pid), is broken at once. A lock
from another host (a network file system, where pids cannot be checked), a
lock of a live but hung process and a lock whose holder died before recording
itself are broken once older than ``stale_after``;
waiters wait longer than that, so they outlast a stale lock instead of failing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memostore.errors import LockTimeout
from memostore.odb.lockfile import HOST, LockFile
from memostore.odb.refs import DiskRefContainer

from .faultkit import Child, env_int, figure, seeded_rng

A = "a" * 64


def _write_lock(target: Path, record: dict | None, age_s: float = 0.0) -> Path:
    lock = target.with_name(target.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("" if record is None else json.dumps(record) + "\n")
    if age_s:
        then = time.time() - age_s
        os.utime(lock, (then, then))
    return lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _acquire_at_once(target: Path, stale_after: float = 30.0) -> None:
    """Take the lock with no wait at all: a timeout of 0 allows one attempt, and
    breaking a stale lock is part of that attempt, so only a lock recognised as
    stale at once lets this pass (a wall clock would measure the machine's load)."""
    lock = LockFile(target, timeout=0, stale_after=stale_after)
    lock.acquire()
    lock.commit(A.encode() + b"\n")


def test_waiters_outlast_stale_locks() -> None:
    lock = LockFile(Path("x"))
    assert lock.timeout > lock.stale_after


def test_holder_killed_by_sigkill_is_broken_at_once(tmp_path: Path) -> None:
    target = tmp_path / "refs" / "r"
    target.parent.mkdir(parents=True)
    script = (
        "import sys, time\n"
        "from memostore.odb.lockfile import LockFile\n"
        "LockFile(sys.argv[1]).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    # While the holder lives, it keeps the lock; the waiter's message names it.
    with pytest.raises(LockTimeout, match=f"pid {proc.pid} on {HOST}"):
        LockFile(target, timeout=0.3).acquire()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _acquire_at_once(target)
    assert target.read_text() == A + "\n"
    assert not list(target.parent.glob("*.lock*"))


@pytest.mark.parametrize(
    ("case", "record"),
    [
        ("another host", {"pid": 1, "host": "elsewhere.example", "time": 0}),
        ("a live process of this host (hung)", {"pid": os.getpid(), "host": HOST, "time": 9e9}),
        ("no record (holder died before writing it)", None),
    ],
)
def test_unverifiable_lock_is_broken_by_age_only(tmp_path: Path, case: str, record: dict) -> None:
    target = tmp_path / "r"
    _write_lock(target, record)
    with pytest.raises(LockTimeout):
        LockFile(target, timeout=0.3, stale_after=30).acquire()
    assert target.with_name("r.lock").exists(), f"{case}: a young lock was broken"
    _write_lock(target, record, age_s=31)
    _acquire_at_once(target, stale_after=30)
    # A waiter that arrives while the lock is young waits, and breaks it once it
    # has aged past stale_after: not before (the lock's age when taken says so).
    written = _write_lock(target, record).stat().st_mtime
    waiter = LockFile(target, timeout=60, stale_after=0.5)
    waiter.acquire()
    assert time.time() - written > 0.5, f"{case}: broken while young"
    waiter.commit(A.encode() + b"\n")


def test_dead_pid_on_this_host_is_broken_however_young(tmp_path: Path) -> None:
    target = tmp_path / "r"
    _write_lock(target, {"pid": _dead_pid(), "host": HOST, "time": time.time()})
    _acquire_at_once(target, stale_after=3600)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to date processes")
def test_reused_pid_on_this_host_is_broken_however_young(tmp_path: Path) -> None:
    """The recorded pid now belongs to a process that started after the lock was taken."""
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = tmp_path / "r"
        _write_lock(target, {"pid": newcomer.pid, "host": HOST, "time": time.time() - 60})
        _acquire_at_once(target, stale_after=3600)
    finally:
        newcomer.kill()
        newcomer.wait()


@pytest.mark.slow
def test_compare_and_swap_stays_exclusive_while_holders_are_killed(tmp_path: Path) -> None:
    """Workers bump a counter by CAS while the test SIGKILLs them at random moments.

    Every successful swap is reported; two reports of one value would mean two
    holders at once, and a final value below the number of reports a lost update.
    """
    rng: random.Random = seeded_rng("locks/cas")
    kills_wanted = env_int("MEMOSTORE_RELIABILITY_LOCK_KILLS", 40)
    workers: list[Child] = []
    counter = 0
    kills = 0

    def spawn() -> Child:
        nonlocal counter
        counter += 1
        progress = tmp_path / f"cas-{counter}.txt"
        return Child("cas_child.py", [str(tmp_path / "store")], progress, dict(os.environ))

    workers = [spawn() for _ in range(4)]
    for w in workers:
        w.wait_for("ready")
    finished: list[Child] = []
    while kills < kills_wanted:
        time.sleep(rng.uniform(0.0, 0.05))
        victim = rng.randrange(len(workers))
        workers[victim].kill()
        workers[victim].finish()
        finished.append(workers[victim])
        kills += 1
        workers[victim] = spawn()
        workers[victim].wait_for("ready")
    for w in workers:
        w.kill()
        w.finish()
        finished.append(w)
        kills += 1
    values = [int(p[1]) for w in finished for p in w.lines() if p[0] == "bumped"]
    final = int(DiskRefContainer(tmp_path / "store").read("counter") or "0", 16)
    assert len(values) == len(set(values)), "two holders swapped the same value"
    assert final >= len(values) and final >= max(values, default=0)
    # A worker may die after its swap and before reporting it: at most one per kill.
    assert final - len(values) <= kills
    # Locks the victims held were broken at once: the others kept swapping throughout.
    assert final >= kills, f"only {final} swaps in {kills} kills: a dead holder's lock blocked"
    figure(
        f"locks: {kills} SIGKILLs at random moments of 4 processes making {final} "
        f"compare-and-swap updates of one ref: no update lost, never two lock holders at once, "
        f"no dead holder's lock blocking ({final - len(values)} swaps landed just before "
        "their process died)"
    )
