"""Single-flight: processes (and threads) that miss on one key together run its body once.

Real processes on one store: a barrier through files starts them together, and
each body appends a line to a count file, so "the body ran once" is read from
disk. Timeouts are generous (a loaded 2-core machine); no assertion depends on
how fast a process runs, except that the body ran once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_script, write_script

from memostore import ignore_global, memo
from memostore.errors import MemostoreError
from memostore.lifecycle.maintenance import fsck, gc
from memostore.odb.refs import ref_part
from memostore.odb.store import Store

# The job: `job.py N_BARRIER` waits until N_BARRIER processes are ready, then calls
# slow(21). SLEEP, FAIL, GATE and WAIT come from the environment, which is not part
# of the key, so every process computes the same call. GATE: the body goes on only
# once that file exists (a test creates it when it has seen the waiters wait).
JOB = """\
import os, sys, time
from pathlib import Path

WAIT = {"true": True, "false": False}.get(os.environ.get("WAIT", "true"))
if WAIT is None:
    WAIT = float(os.environ["WAIT"])

import memostore.odb.leases
import memostore.odb.lockfile
from memostore import memo

if os.environ.get("HEARTBEAT"):  # this process's leases: heartbeat and expiry, in seconds
    memostore.odb.leases.HEARTBEAT_S, memostore.odb.leases.EXPIRES_S = map(
        float, os.environ["HEARTBEAT"].split(",")
    )
if os.environ.get("PRETEND_HOST"):  # judge other leases as a process of another host would
    memostore.odb.lockfile.HOST = os.environ["PRETEND_HOST"]


@memo(wait=WAIT)
def slow(n):
    with open(os.environ["COUNT"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    gate = os.environ.get("GATE")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(float(os.environ.get("SLEEP", "1")))
    if os.environ.get("FAIL"):
        raise RuntimeError("boom")
    return {"value": n * 2}


if __name__ == "__main__":
    ready = Path(os.environ["READY"])
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while len(list(ready.iterdir())) < int(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.01)
    if len(sys.argv) > 2:
        print("KEY", slow.key(21), slow.symbol, flush=True)
        sys.exit(0)
    print("RESULT", slow(21), flush=True)
"""

TIMEOUT = 120


@pytest.fixture
def job(tmp_path: Path, store_dir: Path) -> Path:
    return write_script(tmp_path, "job.py", JOB)


def _env(tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "COUNT": str(tmp_path / "count"),
        "READY": str(tmp_path / f"ready-{name}"),
        **extra,
    }


def _start(job: Path, tmp_path: Path, name: str, barrier: int, **extra: str) -> subprocess.Popen:
    err = open(tmp_path / f"{name}.err", "w")  # noqa: SIM115  (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, str(job), str(barrier)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=_env(tmp_path, name, **extra),
        cwd=str(tmp_path),
    )
    err.close()
    return proc


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=TIMEOUT)
    return out


def _runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "count"
    return path.read_text().split() if path.exists() else []


def _until(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def _stderr(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.err").read_text()


def test_four_processes_on_one_key_run_the_body_once(job: Path, tmp_path: Path) -> None:
    procs = [
        _start(job, tmp_path, f"p{i}", 4, READY=str(tmp_path / "ready"), SLEEP="3")
        for i in range(4)
    ]
    outs = [_finish(p) for p in procs]
    errs = [_stderr(tmp_path, f"p{i}") for i in range(4)]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    runs = _runs(tmp_path)
    assert len(runs) == 1
    assert len(set(outs)) == 1 and "RESULT {'value': 42}" in outs[0]
    holder = [p.pid for p in procs].index(int(runs[0]))
    # One line from each waiter (naming the holder), none from the holder; a
    # process slow to start may find the result stored and wait for nothing.
    assert errs[holder].count("waiting") == 0
    others = [e for i, e in enumerate(errs) if i != holder]
    assert all(e.count("waiting") <= 1 for e in others), others
    assert max(e.count(f"waiting for pid {runs[0]} on ") for e in others) == 1, others


def _holder_then_waiters(
    job: Path, tmp_path: Path, holder_env: dict[str, str], waiters: int
) -> tuple[subprocess.Popen, list[subprocess.Popen]]:
    """Start a holder, wait until its body runs, then start waiters and wait until they wait."""
    holder = _start(job, tmp_path, "holder", 1, **holder_env)
    _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
    procs = [_start(job, tmp_path, f"w{i}", 1, SLEEP="0.5") for i in range(waiters)]
    for i in range(waiters):
        _until(lambda i=i: "waiting for pid" in _stderr(tmp_path, f"w{i}"), f"w{i} waits")
    return holder, procs


@pytest.mark.slow
def test_a_killed_holder_is_taken_over_by_exactly_one_waiter(job: Path, tmp_path: Path) -> None:
    holder, waiters = _holder_then_waiters(job, tmp_path, {"SLEEP": "300"}, 3)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=TIMEOUT)
    outs = [_finish(p) for p in waiters]
    assert [p.returncode for p in waiters] == [0, 0, 0]
    assert len(set(outs)) == 1 and "RESULT {'value': 42}" in outs[0]
    runs = _runs(tmp_path)
    assert len(runs) == 2 and runs[0] == str(holder.pid)  # the holder, then one waiter
    errs = [_stderr(tmp_path, f"w{i}") for i in range(3)]
    assert sum("died while computing" in e for e in errs) == 1, errs


def test_a_holder_that_raises_lets_the_waiters_compute(job: Path, tmp_path: Path) -> None:
    # The holder raises only once both waiters wait (a fixed sleep loses that race
    # on a loaded machine, where a waiter can start after the holder has failed).
    gate = tmp_path / "gate"
    holder_env = {"SLEEP": "0", "FAIL": "1", "GATE": str(gate)}
    holder, waiters = _holder_then_waiters(job, tmp_path, holder_env, 2)
    gate.touch()
    _finish(holder)
    assert holder.returncode != 0 and "RuntimeError: boom" in _stderr(tmp_path, "holder")
    outs = [_finish(p) for p in waiters]
    assert [p.returncode for p in waiters] == [0, 0]
    assert all("RESULT {'value': 42}" in out for out in outs)
    assert len(_runs(tmp_path)) == 2  # the holder's failed run, then one waiter's
    assert not any("boom" in _stderr(tmp_path, f"w{i}") for i in range(2))
    store = Store(os.environ["MEMOSTORE_DIR"])
    assert [e for _, e in store.refs.iter("failed/")], "the failure is recorded as before"


def test_wait_false_computes_at_once(job: Path, tmp_path: Path) -> None:
    holder = _start(job, tmp_path, "holder", 1, SLEEP="300")
    try:
        _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
        eager = run_script(job, "1", env=_env(tmp_path, "eager", WAIT="false", SLEEP="0"))
        assert "RESULT {'value': 42}" in eager.stdout
        assert "waiting" not in eager.stderr
        assert holder.poll() is None  # the holder computes on, undisturbed
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT)
    assert len(_runs(tmp_path)) == 2  # the holder and the eager run


def test_a_bounded_wait_computes_after_its_limit(job: Path, tmp_path: Path) -> None:
    holder = _start(job, tmp_path, "holder", 1, SLEEP="300")
    try:
        _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
        bounded = run_script(job, "1", env=_env(tmp_path, "bounded", WAIT="0.5", SLEEP="0"))
        assert "RESULT {'value': 42}" in bounded.stdout
        assert bounded.stderr.count("waiting for pid") == 1
        assert re.search(r"waited \d+ s for pid \d+ on .*; computing it here", bounded.stderr)
        assert len(_runs(tmp_path)) == 2
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT)


def _key_and_lease(job: Path, tmp_path: Path) -> Path:
    out = run_script(job, "1", "key", env=_env(tmp_path, "key")).stdout.split()
    key, symbol = out[out.index("KEY") + 1], out[out.index("KEY") + 2]
    path = Path(os.environ["MEMOSTORE_DIR"]) / "leases" / ref_part(symbol) / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _plant(path: Path, heartbeat: float, **record: object) -> None:
    base = {"thread": 1, "id": "0" * 32, "started": heartbeat, "heartbeat_s": 5, "expires_s": 30}
    path.write_text(json.dumps({**base, **record}))
    os.utime(path, (heartbeat, heartbeat))


def test_a_lease_of_another_host_with_an_old_heartbeat_is_taken_over(
    job: Path, tmp_path: Path
) -> None:
    lease = _key_and_lease(job, tmp_path)
    _plant(lease, time.time() - 600, host="elsewhere.invalid", pid=12345, process_started=1.0)
    proc = run_script(job, "1", env=_env(tmp_path, "taker", SLEEP="0"))
    assert "RESULT {'value': 42}" in proc.stdout
    assert "pid 12345 on elsewhere.invalid stopped its heartbeat" in proc.stderr
    assert len(_runs(tmp_path)) == 1
    assert not lease.exists()  # the taker's own lease, removed once stored


def test_a_holder_on_another_host_is_kept_alive_by_its_heartbeat(job: Path, tmp_path: Path) -> None:
    # The holder's lease expires 1 s after its last heartbeat, beaten every 0.2 s; its
    # body runs 4 s. The waiter, as if on another host, can judge it by heartbeat only.
    holder = _start(job, tmp_path, "holder", 1, SLEEP="4", HEARTBEAT="0.2,1")
    _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
    # The body reads SLEEP: the holder's result answers only a call that sees the same value.
    env = _env(tmp_path, "waiter", PRETEND_HOST="elsewhere.invalid", SLEEP="4")
    waiter = run_script(job, "1", env=env)
    assert "RESULT {'value': 42}" in waiter.stdout
    assert waiter.stderr.count("waiting for pid") == 1
    assert "heartbeat" not in waiter.stderr
    _finish(holder)
    assert holder.returncode == 0
    assert len(_runs(tmp_path)) == 1


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("holder", ["dead pid", "reused pid"])
def test_a_lease_of_a_dead_holder_on_this_host_is_taken_over_at_once(
    job: Path, tmp_path: Path, holder: str
) -> None:
    lease = _key_and_lease(job, tmp_path)
    # A reused pid: a live process (this one), started at another time than recorded.
    pid, started = (_dead_pid(), None) if holder == "dead pid" else (os.getpid(), 1.0)
    _plant(lease, time.time(), host=socket.gethostname(), pid=pid, process_started=started)
    t0 = time.monotonic()
    proc = run_script(job, "1", env=_env(tmp_path, "taker", SLEEP="0"))
    assert "RESULT {'value': 42}" in proc.stdout
    assert f"pid {pid} on {socket.gethostname()} died while computing" in proc.stderr
    assert len(_runs(tmp_path)) == 1
    assert time.monotonic() - t0 < 29  # not by the lease's 30 s expiry


def test_a_live_lease_is_no_damage_and_gc_removes_only_dead_ones(job: Path, tmp_path: Path) -> None:
    holder = _start(job, tmp_path, "holder", 1, SLEEP="300")
    try:
        _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
        store = Store(os.environ["MEMOSTORE_DIR"])
        (lease,) = (store.root / "leases").rglob("*.json")
        assert fsck(store, rebuild_index=False).ok
        gc(store, grace_s=0)
        assert lease.exists()  # its holder lives
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT)
    assert lease.exists()
    report = gc(store, grace_s=0)
    assert not lease.exists() and report.tmp_removed >= 1


THREADS = """\
import os, sys, threading, time
from pathlib import Path
from memostore import memo

COUNT = Path(os.environ["COUNT"])
FLAG = Path(os.environ["FLAG"])


def count(name):
    with open(COUNT, "a") as f:
        f.write(name + "\\n")


@memo
def inner(n):
    count("inner")
    return n + 1


@memo
def outer(n):
    count("outer")
    time.sleep(2)  # the other threads miss while the body runs
    return inner(n) * 2


@memo
def again(n):
    count("again")
    if not FLAG.exists():
        FLAG.touch()
        return again(n) + 1  # the same key inside its own body: computed, not waited for
    return n


barrier = threading.Barrier(4)
results = []


def call():
    barrier.wait()
    results.append(outer(20))


threads = [threading.Thread(target=call) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print("RESULTS", results)
print("AGAIN", again(5))
"""


def test_threads_of_one_process_wait_on_the_first_and_reentry_computes(
    tmp_path: Path, store_dir: Path
) -> None:
    script = write_script(tmp_path, "threads.py", THREADS)
    env = {"COUNT": str(tmp_path / "count"), "FLAG": str(tmp_path / "flag")}
    proc = run_script(script, env=env, timeout=TIMEOUT)
    assert "RESULTS [42, 42, 42, 42]" in proc.stdout
    assert "AGAIN 6" in proc.stdout
    assert sorted(_runs(tmp_path)) == ["again", "again", "inner", "outer"]
    # One line per waiting thread; a thread slow to start may find the result stored.
    assert 1 <= proc.stderr.count("waiting for another thread of this process") <= 3


def test_threads_on_an_in_memory_store_run_the_body_once() -> None:
    runs: list[int] = ignore_global([])  # a count, not part of the key
    gate = threading.Barrier(3)

    @memo(store=Store.in_memory())
    def square(n):
        runs.append(n)
        time.sleep(0.5)
        return n * n

    results: list[int] = []

    def call() -> None:
        gate.wait()
        results.append(square(7))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert results == [49, 49, 49]
    assert runs == [7]


def test_wait_must_be_a_bool_or_seconds(store_dir: Path) -> None:
    for wrong in ("yes", -1, float("nan")):
        with pytest.raises(MemostoreError, match="wait=True"):
            memo(wait=wrong)(lambda: 1)


RANK = """\
import os, sys, time
from pathlib import Path
import torch.distributed as dist
from memostore import memo

dist.init_process_group(
    "gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1
)


@memo
def prepare(n):
    with open(os.environ["COUNT"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(2)
    return n + 1


ready = Path(os.environ["READY"])
(ready / str(os.getpid())).touch()
while len(list(ready.iterdir())) < 2:
    time.sleep(0.01)
print("RESULT", prepare(1))
"""


@pytest.mark.slow
def test_ranks_of_a_torch_distributed_group_each_compute(tmp_path: Path, store_dir: Path) -> None:
    # Each rank runs a miss (a body with collectives needs them all): no rank waits.
    script = write_script(tmp_path, "rank.py", RANK)
    (tmp_path / "ready").mkdir()
    env = {**os.environ, "COUNT": str(tmp_path / "count"), "READY": str(tmp_path / "ready")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / f"group-{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("RESULT 2" in out for out, _ in outs)
    assert not any("waiting" in err for _, err in outs)
    assert len(_runs(tmp_path)) == 2
