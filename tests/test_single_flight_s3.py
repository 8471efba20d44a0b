"""Single-flight between machines that share only a remote with auto-fetch (S3, a directory).

Each process has its own local store (as each machine of a cluster would); the
stores share nothing but a bucket on a real ``moto_server``. The job is the
one of ``test_single_flight.py``: a body that appends its pid to a count file,
so "the body ran once" is read from disk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_script
from test_single_flight import JOB, TIMEOUT, _until

from memostore import Store, ignore_global, memo
from memostore.remote import add_remote
from memostore.remote import leases as remote_leases
from memostore.transport import open_transport


@pytest.fixture
def job(tmp_path: Path, s3_bucket: str) -> Path:
    return write_script(tmp_path, "job.py", JOB)


def _store(tmp_path: Path, name: str, bucket: str, endpoint: str) -> Path:
    """A local store of its own, with the shared bucket as its auto-fetch remote."""
    path = tmp_path / f"store-{name}"
    add_remote(Store(path), "origin", bucket, endpoint=endpoint, auto_fetch=True)
    return path


def _start(
    job: Path, tmp_path: Path, name: str, store: Path, barrier: int, **extra: str
) -> subprocess.Popen:
    env = {
        **os.environ,
        "MEMOSTORE_DIR": str(store),
        "COUNT": str(tmp_path / "count"),
        "READY": str(tmp_path / f"ready-{name}"),
        **extra,
    }
    with open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen(
            [sys.executable, str(job), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=str(tmp_path),
        )


def _runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "count"
    return path.read_text().split() if path.exists() else []


def _stderr(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.err").read_text()


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    return [p.communicate(timeout=TIMEOUT)[0] for p in procs]


def _remote_names(bucket: str, prefix: str) -> list[str]:
    with open_transport(bucket) as transport:
        return sorted(transport.list(prefix))


@pytest.mark.s3
def test_two_machines_sharing_a_bucket_run_the_body_once(
    job: Path, tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    stores = [_store(tmp_path, n, s3_bucket, s3_server) for n in "ab"]
    # Started together; whichever computes goes on once the other one waits (so a
    # loaded machine cannot start the waiter after the holder has finished).
    gate = tmp_path / "gate"
    procs = [
        _start(job, tmp_path, n, s, 2, READY=str(tmp_path / "ready"), SLEEP="0", GATE=str(gate))
        for n, s in zip("ab", stores, strict=True)
    ]
    _until(lambda: any("waiting for pid" in _stderr(tmp_path, n) for n in "ab"), "one waits")
    gate.touch()
    outs = _finish(procs)
    errs = [_stderr(tmp_path, n) for n in "ab"]
    assert [p.returncode for p in procs] == [0, 0], errs
    runs = _runs(tmp_path)
    assert len(runs) == 1, errs
    assert all("RESULT {'value': 42}" in out for out in outs), outs
    waiter = 1 - [p.pid for p in procs].index(int(runs[0]))
    assert f"waiting for pid {runs[0]} on " in errs[waiter], errs
    assert "(through remote origin)" in errs[waiter]
    # The holder saw the waiter's marker and published its evaluation; the waiter's
    # store holds the same evaluation, fetched. The lease and the marker are gone.
    assert _remote_names(s3_bucket, "leases/") == []
    (ref,) = _remote_names(s3_bucket, "refs/evals/")
    ref = ref.removeprefix("refs/")
    assert Store(stores[0]).refs.read(ref) == Store(stores[1]).refs.read(ref) is not None


def test_a_shared_directory_remote_serves_as_well(tmp_path: Path) -> None:
    # Any remote transport has the conditional writes the lease needs.
    job = write_script(tmp_path, "job.py", JOB)
    remote = tmp_path / "remote"
    Store(remote)  # an existing remote: a lookup never creates one
    stores = []
    for name in "ab":
        stores.append(tmp_path / f"store-{name}")
        add_remote(Store(stores[-1]), "origin", str(remote), auto_fetch=True)
    procs = [
        _start(job, tmp_path, n, s, 2, READY=str(tmp_path / "ready"), SLEEP="2")
        for n, s in zip("ab", stores, strict=True)
    ]
    outs = _finish(procs)
    errs = [_stderr(tmp_path, n) for n in "ab"]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert len(_runs(tmp_path)) == 1, errs
    assert all("RESULT {'value': 42}" in out for out in outs), outs
    assert sum("(through remote origin)" in e for e in errs) == 1, errs
    assert [p for p in (remote / "leases").rglob("*") if not p.is_dir()] == []


@pytest.mark.s3
@pytest.mark.slow
def test_a_killed_holder_expires_and_exactly_one_waiter_takes_over(
    job: Path, tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    holder_store = _store(tmp_path, "h", s3_bucket, s3_server)
    # Heartbeat 0.2 s, expiry 1.5 s: the holder's lease records both.
    holder = _start(job, tmp_path, "h", holder_store, 1, SLEEP="300", HEARTBEAT="0.2,1.5")
    _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
    waiters = [
        # On "another host": the holder is judged by its heartbeat, not by its pid.
        _start(
            job,
            tmp_path,
            f"w{i}",
            _store(tmp_path, f"w{i}", s3_bucket, s3_server),
            1,
            SLEEP="0.5",
            PRETEND_HOST="another-host",
        )
        for i in range(2)
    ]
    for i in range(2):
        _until(lambda i=i: "waiting for pid" in _stderr(tmp_path, f"w{i}"), f"w{i} waits")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=TIMEOUT)
    outs = _finish(waiters)
    errs = [_stderr(tmp_path, f"w{i}") for i in range(2)]
    assert [p.returncode for p in waiters] == [0, 0], errs
    assert all("RESULT {'value': 42}" in out for out in outs), outs
    runs = _runs(tmp_path)
    assert len(runs) == 2 and runs[0] == str(holder.pid), errs  # the holder, then one waiter
    assert sum("stopped its heartbeat in remote origin" in e for e in errs) == 1, errs
    assert _remote_names(s3_bucket, "leases/") == []


@pytest.mark.s3
def test_heartbeats_keep_a_holder_longer_than_its_expiry(
    job: Path, tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    # Expiry 1 s, renewed every 0.2 s: the body sleeps 3 s once the waiter watches
    # (the gate), outliving the expiry several times over.
    gate = tmp_path / "gate"
    holder = _start(
        job, tmp_path, "h", _store(tmp_path, "h", s3_bucket, s3_server), 1,
        SLEEP="3", HEARTBEAT="0.2,1", GATE=str(gate),
    )  # fmt: skip
    _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
    waiter = _start(
        job, tmp_path, "w", _store(tmp_path, "w", s3_bucket, s3_server), 1,
        PRETEND_HOST="another-host", SLEEP="3", GATE=str(gate),
    )  # fmt: skip
    _until(lambda: "waiting for pid" in _stderr(tmp_path, "w"), "the waiter waits")
    gate.touch()  # the holder's body sleeps only now, its waiter watching
    outs = _finish([holder, waiter])
    assert [holder.returncode, waiter.returncode] == [0, 0], _stderr(tmp_path, "w")
    assert len(_runs(tmp_path)) == 1, _stderr(tmp_path, "w")  # never taken over
    assert all("RESULT {'value': 42}" in out for out in outs)


@pytest.mark.s3
def test_a_holder_that_raises_lets_the_waiter_compute(
    job: Path, tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    gate = tmp_path / "gate"
    holder = _start(
        job, tmp_path, "h", _store(tmp_path, "h", s3_bucket, s3_server), 1,
        SLEEP="0", FAIL="1", GATE=str(gate),
    )  # fmt: skip
    _until(lambda: len(_runs(tmp_path)) == 1, "the holder's body runs")
    waiter = _start(job, tmp_path, "w", _store(tmp_path, "w", s3_bucket, s3_server), 1, SLEEP="0")
    _until(lambda: "waiting for pid" in _stderr(tmp_path, "w"), "the waiter waits")
    gate.touch()  # the holder raises only now, its waiter registered
    (_, out_waiter) = _finish([holder, waiter])
    assert holder.returncode != 0 and "RuntimeError: boom" in _stderr(tmp_path, "h")
    assert waiter.returncode == 0 and "RESULT {'value': 42}" in out_waiter
    assert "boom" not in _stderr(tmp_path, "w")
    assert len(_runs(tmp_path)) == 2  # the holder's failed run, then the waiter's
    # Nothing was published: a failure never is, and no one waited for the waiter.
    assert _remote_names(s3_bucket, "refs/") == []
    assert _remote_names(s3_bucket, "leases/") == []  # no lease, no marker left


_computed: list[int] = ignore_global([])  # a count of body runs, not part of any key


def _tripled(n: int) -> dict[str, int]:
    _computed.append(n)
    return {"value": n * 3}


@pytest.mark.s3
def test_a_miss_publishes_only_when_someone_waits(
    tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    # In this process, as two machines would: each store has the bucket as its
    # auto-fetch remote. Alone, the miss takes the lease there, finds no waiter's
    # marker beside it and uploads nothing (no ref, no object); it leaves no lease.
    _computed.clear()
    stores = [Store(_store(tmp_path, name, s3_bucket, s3_server)) for name in "ab"]
    with open_transport(s3_bucket) as remote:
        first = memo(store=stores[0])(_tripled)
        assert first(7) == {"value": 21} and _computed == [7]
        assert list(remote.list("")) == []
        ((ref, _),) = stores[0].refs.iter("evals/")
        # A marker left beside the lease by a waiter killed while it waited: the next
        # miss of that call (the other machine) sees it, publishes, and deletes it.
        marker = remote_leases.lease_name(ref) + ".waiting/gone-host-4242-00ff"
        remote.put_bytes(marker, b'{"host": "gone-host", "pid": 4242, "since": 0}\n')
        second = memo(store=stores[1])(_tripled)
        assert second(7) == {"value": 21}
        assert _computed == [7, 7]  # nothing had been published for it to fetch
        assert list(remote.list("refs/")) == [f"refs/{ref}"]
        assert list(remote.list("leases/")) == []


def test_without_an_auto_fetch_remote_a_miss_does_nothing_more(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    ref = "evals/m%3Af/" + "0" * 64

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("no remote: nothing to look up or say")

    started = time.perf_counter()
    for _ in range(2000):
        assert remote_leases.begin(store, ref, "m:f", "0" * 64, None, never, never) is None
    per_call = (time.perf_counter() - started) / 2000
    assert per_call < 100e-6, per_call  # a dict lookup (about 3 us idle)
