"""How logged points are stored: exact round trips, chunk sharing, size, crashes, concurrency."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_script, write_script

from memostore import Store, memo
from memostore.metrics import (
    SummaryWriter,
    journal_roots,
    load_manifest,
    load_series,
    recover_orphans,
)
from memostore.metrics.columns import decode_columns, encode_columns
from memostore.metrics.journal import Journal, parse
from memostore.records.evaluation import Evaluation, failed_ref_name

SPECIAL = [
    0.0,
    -0.0,
    1.0,
    float("nan"),
    float("inf"),
    float("-inf"),
    5e-324,
    1.7976931348623157e308,
    struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0],  # NaN with a payload
    -struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0],  # a signalling NaN
]
STEPS = [5, 5, -3, 2**63 - 1, -(2**63), 0, 4, 4, 1, -1]


def _bits(values: np.ndarray | list[float]) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def test_values_and_steps_round_trip_bit_exactly(store_dir: Path) -> None:
    @memo
    def run(k: int):
        w = SummaryWriter()
        for step, value in zip(STEPS, SPECIAL, strict=True):
            w.add_scalar("v", value, step)
        return k

    run(1)
    store = Store.default()
    steps, values, walls = load_series(store, run.lookup(1).logs_id, "v")
    assert steps.dtype == np.int64 and values.dtype == np.float64
    assert steps.tolist() == STEPS
    assert _bits(values) == _bits(SPECIAL)
    assert len(walls) == len(STEPS) and np.all(np.diff(walls) >= 0)


def test_columns_encoding_is_exact_and_deterministic() -> None:
    rng = np.random.default_rng(0)
    cases = {
        "empty": ("f8", np.array([], dtype=np.float64)),
        "special": ("f8", np.array(SPECIAL * 50)),
        "random": ("f8", rng.standard_normal(10_000)),
        "steps": ("i8", np.array(STEPS * 30, dtype=np.int64)),
        "ramp": ("i8", np.arange(-5, 100_000, dtype=np.int64)),
        "texts": ("json", ["a", "ü", ""]),
    }
    blob = encode_columns(cases)
    assert blob == encode_columns(cases)
    decoded = decode_columns(blob)
    for name, (kind, data) in cases.items():
        if kind == "json":
            assert decoded[name] == data
        else:
            assert (
                np.asarray(data).view(np.uint64).tolist() == decoded[name].view(np.uint64).tolist()
            )


def test_journal_reader_stops_at_a_torn_record(tmp_path: Path) -> None:
    journal = Journal(tmp_path, {"run_id": "r1", "function": "f"})
    for i in range(10):
        journal.add_scalar("x", i, float(i), 1.0)
    journal.flush()
    journal.add_event({"kind": "text", "tag": "t", "text": "hi", "step": 0, "wall": 1.0})
    journal.flush()
    data = (tmp_path / "r1.journal").read_bytes()
    whole = parse(data)
    assert len(whole.events) == 1 and not whole.damaged
    torn = parse(data[:-3])
    assert torn.damaged and torn.events == [] and len(torn.scalars["x"]) == 1
    journal.finish()
    journal.discard()
    assert not (tmp_path / "r1.journal").exists()


def test_deterministic_runs_share_step_and_value_chunks(store_dir: Path) -> None:
    @memo
    def run(seed: int, label: str):
        rng = np.random.default_rng(seed)
        w = SummaryWriter()
        for i in range(70_000):  # more than one chunk
            w.add_scalar("loss", float(rng.random()), i)
        return label

    run(0, "a")
    run(0, "b")
    store = Store.default()
    a = load_manifest(store, run.lookup(0, "a").logs_id)["tags"]["loss"]["chunks"]
    b = load_manifest(store, run.lookup(0, "b").logs_id)["tags"]["loss"]["chunks"]
    assert len(a) == 2
    assert [c["data"] for c in a] == [c["data"] for c in b]
    assert [c["walls"] for c in a] != [c["walls"] for c in b]


def test_100k_scalars_take_under_1mb(store_dir: Path) -> None:
    @memo
    def run(k: int):
        rng = np.random.default_rng(k)
        w = SummaryWriter()
        for i in range(100_000):
            w.add_scalar("loss", float(rng.random()), i)
        return k

    run(1)
    store = Store.default()
    logs_id = run.lookup(1).logs_id
    doc = store.objects.get_doc(logs_id)
    total = store.objects.size_of(logs_id) + sum(store.objects.size_of(b) for b in doc.links.blobs)
    assert total < 1_000_000, total


CONCURRENT = """
import sys
from memostore import memo
from memostore.tensorboard import SummaryWriter

@memo
def train(worker: int, n: int):
    w = SummaryWriter()
    for i in range(n):
        w.add_scalar("loss", worker * 1e6 + i, i)
        if i % 1000 == 0:
            w.add_text("progress", f"{worker}:{i}", i)
    return worker

train(int(sys.argv[1]), int(sys.argv[2]))
"""


def test_two_processes_log_into_one_store_at_once(store_dir: Path, tmp_path: Path) -> None:
    script = write_script(tmp_path, "log_at_once.py", CONCURRENT)
    n = 60_000
    procs = [
        subprocess.Popen([sys.executable, str(script), str(k), str(n)], cwd=tmp_path)
        for k in (1, 2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = Store(store_dir, create=False)
    refs = dict(store.iter_evaluation_refs())
    assert len(refs) == 2
    for evaluation_id in refs.values():
        evaluation = Evaluation.load(store, evaluation_id)
        worker = evaluation.hparams["worker"]
        steps, values, _ = load_series(store, evaluation.logs_id, "loss")
        assert steps.tolist() == list(range(n))
        assert values.tolist() == [worker * 1e6 + i for i in range(n)]
    assert not list((store_dir / "journal").iterdir())


KILLED = """
import os, signal, sys, time
import memostore.metrics.journal as journal
from memostore import memo
from memostore.tensorboard import SummaryWriter

journal.FLUSH_INTERVAL_S = float(sys.argv[1])

@memo
def train(n: int):
    w = SummaryWriter()
    for i in range(n):
        w.add_scalar("loss", float(i), i)
    if journal.FLUSH_INTERVAL_S > 100:
        w.flush()
    time.sleep(1.0)  # the background flush runs meanwhile
    for i in range(n, n + 7):
        w.add_scalar("loss", float(i), i)  # never flushed: lost with the process
    os.kill(os.getpid(), signal.SIGKILL)

train(500)
"""


@pytest.mark.parametrize("interval", ["0.2", "1000"], ids=["timer-flush", "explicit-flush"])
def test_sigkill_keeps_flushed_points(store_dir: Path, tmp_path: Path, interval: str) -> None:
    script = write_script(tmp_path, "killed.py", KILLED)
    proc = run_script(script, interval, check=False)
    assert proc.returncode == -signal.SIGKILL
    store = Store(store_dir, create=False)
    assert len(list((store_dir / "journal").glob("*.journal"))) == 1

    recorded = recover_orphans(store)
    assert len(recorded) == 1
    evaluation = Evaluation.load(store, recorded[0])
    assert evaluation.status == "interrupted"
    assert evaluation.function == "__main__:train"
    assert "killed" in evaluation.error["message"]
    assert evaluation.hparams == {"n": 500}
    steps, values, _ = load_series(store, evaluation.logs_id, "loss")
    # Every flushed point survives; the last few, logged just before the kill,
    # survive only if a timer flush happened to run in between.
    assert 500 <= len(steps) <= 507
    assert steps.tolist() == list(range(len(steps)))
    assert values.tolist() == [float(i) for i in range(len(steps))]
    ref = failed_ref_name(evaluation.function, evaluation.key)
    assert store.refs.read(ref) == evaluation.id
    assert not list((store_dir / "journal").glob("*.journal"))
    assert recover_orphans(store) == []


LIVE = """
import time
from memostore import memo
from memostore.tensorboard import SummaryWriter

@memo
def slow(n: int):
    w = SummaryWriter()
    w.add_scalar("x", 1.0, 0)
    w.flush()
    print("logging", flush=True)
    time.sleep(n)
    return n

slow(30)
"""


def test_a_live_journal_is_never_recovered(store_dir: Path, tmp_path: Path) -> None:
    script = write_script(tmp_path, "live.py", LIVE)
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "logging"
        store = Store(store_dir, create=False)
        assert recover_orphans(store) == []
        assert len(list((store_dir / "journal").glob("*.journal"))) == 1
    finally:
        proc.kill()
        proc.wait()
    # Now its process is gone: the next one to log into the store recovers it.
    later = write_script(
        tmp_path,
        "later.py",
        """
        from memostore.tensorboard import SummaryWriter
        SummaryWriter().add_scalar("y", 2.0, 0)
        """,
    )
    run_script(later)
    interrupted = [
        Evaluation.load(store, eid)
        for name, eid in store.iter_evaluation_refs()
        if name.startswith("failed/")
    ]
    assert [e.status for e in interrupted] == ["interrupted"]
    assert load_series(store, interrupted[0].logs_id, "x")[1].tolist() == [1.0]
    assert not list((store_dir / "journal").glob("*.journal"))
    assert os.listdir(store_dir / "journal") == []


def test_journals_keep_their_image_blobs_as_gc_roots(store_dir: Path) -> None:
    store = Store.default()
    journal = Journal(store.subdir("journal"), {"run_id": "r2", "function": "f"})
    blob = store.objects.add_bytes(b"\x89PNG fake")
    journal.add_event({"kind": "image", "tag": "i", "blob": blob, "step": 0, "wall": 1.0})
    journal.flush()
    assert journal_roots(store) == {blob}
    journal.finish()
    journal.discard()
    assert journal_roots(store) == set()
