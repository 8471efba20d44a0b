"""Logging is visible while training: running evaluations, live metrics, crashes, plot --follow.

A child process logs inside a memoised call (or a standalone run), driven line
by line through its stdin, while the test reads the store from its own
process: ``memostore log``/``show`` through click's runner, ``plot --follow``
as a real console script, and the Python API.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import write_script
from memostore_cli.main import cli

from memostore.metrics import LiveLogs, running_evaluations

TRAINER = """
import os, signal, sys
if len(sys.argv) > 3 and sys.argv[3] == "elsewhere":
    import socket
    socket.gethostname = lambda: "elsewhere"  # as if it ran on another machine
from memostore import memo, SummaryWriter

def body():
    w = SummaryWriter()
    print("ready", flush=True)
    n = 0
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "log":
            for _ in range(int(arg)):
                w.add_scalar("loss", 1.0 / (n + 1), n)
                n += 1
            print("logged", n, flush=True)
        elif cmd == "return":
            return n
        elif cmd == "raise":
            raise RuntimeError("diverged")
        elif cmd == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    return n

@memo
def train(lr: float, name: str):
    return body()

if sys.argv[1] == "memo":
    print("result", train(0.5, sys.argv[2]), flush=True)
else:
    print("result", body(), flush=True)
"""

LATENCY_S = 2.0


class Child:
    """The trainer in its own process, driven through stdin."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        script = tmp_path / "trainer.py"
        if not script.exists():
            write_script(tmp_path, "trainer.py", TRAINER)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = Lines(self.proc.stdout)
        assert self.lines.next() == "ready"

    def send(self, *commands: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(c + "\n" for c in commands))
        self.proc.stdin.flush()

    def log(self, n: int) -> int:
        """Log *n* points; the total logged so far."""
        self.send(f"log {n}")
        word, total = self.lines.next().split()
        assert word == "logged"
        return int(total)

    def wait(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)


class Lines:
    """The lines of a pipe, read by a thread, waited for with a timeout."""

    def __init__(self, pipe: Any) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def next(self, timeout: float = 30) -> str:
        line = self.queue.get(timeout=timeout)
        assert line is not None, f"the pipe closed; read so far: {self.seen}"
        self.seen.append(line)
        return line

    def until(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(timeout=max(0.01, deadline - time.monotonic()))
            if text in line:
                return line


@pytest.fixture
def child(store_dir: Path, tmp_path: Path) -> Any:
    children: list[Child] = []

    def start(*args: str) -> Child:
        children.append(Child(tmp_path, *args))
        return children[-1]

    yield start
    for c in children:
        c.kill()


def cli_json(store_dir: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--store", str(store_dir), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def count_of(record: dict[str, Any], tag: str = "loss") -> int:
    return int((record["metrics"].get(tag) or {}).get("count", 0))


def test_a_running_call_is_listed_and_its_metrics_grow(store_dir: Path, child: Any) -> None:
    trainer = child("memo", "a")
    before = time.time()
    # Listed from its start, before it logged anything.
    [running] = cli_json(store_dir, "log", "train")
    assert running["status"] == "running"
    assert running["function"] == "__main__:train"
    assert running["args"] == {"lr": 0.5, "name": "a"}
    assert before - 30 < running["started"] <= before
    assert running["created"].startswith(time.strftime("%Y-", time.gmtime(before)))
    run_id = running["id"]

    # Each point is in the file within the flush interval: read 1.5 s after it was
    # logged (never flushed by hand), show has it.
    assert trainer.log(10) == 10
    time.sleep(1.5)
    shown = cli_json(store_dir, "show", run_id[:8])
    assert shown["status"] == "running"
    assert count_of(shown) == 10
    assert shown["metrics"]["loss"]["last"] == pytest.approx(0.1)
    assert shown["args"] == {"lr": 0.5, "name": "a"}
    assert shown["provenance"]["pid"] == trainer.proc.pid

    # The Python API: the new points arrive within the latency target.
    [run] = running_evaluations()
    with run.logs() as logs:
        assert logs.poll() == {"loss": 10}
        offset = logs.offset
        assert logs.poll() == {} and logs.offset == offset  # nothing new, nothing read
        logged_at = time.monotonic()
        assert trainer.log(25) == 35
        while logs.summary()["loss"]["count"] < 35:
            assert time.monotonic() - logged_at < LATENCY_S, "points not visible within 2 s"
            new = logs.poll()
            assert set(new) <= {"loss"}
            time.sleep(0.02)
        assert logs.offset > offset
        steps, values, _ = logs.series("loss")
        assert steps.tolist() == list(range(35))
        assert values[-1] == 1.0 / 35
    # By function name, the running evaluation is the newest one.
    assert count_of(cli_json(store_dir, "show", "train")) == 35

    trainer.send("return")
    assert trainer.lines.until("result") == "result 35"
    assert trainer.wait() == 0
    [done] = cli_json(store_dir, "log")
    assert done["status"] == "ok" and done["logs"]
    assert count_of(cli_json(store_dir, "show", done["id"])) == 35


def test_sigkill_leaves_interrupted_with_every_flushed_point(store_dir: Path, child: Any) -> None:
    trainer = child("memo", "killed")
    [run] = running_evaluations()
    assert trainer.log(30) == 30
    with run.logs() as logs:  # wait until the timer flush wrote them
        deadline = time.monotonic() + LATENCY_S
        while logs.summary().get("loss", {}).get("count", 0) < 30:
            assert time.monotonic() < deadline, "points not flushed within 2 s"
            logs.poll()
            time.sleep(0.05)
    trainer.send("log 5", "kill")  # killed right after: those 5 are probably never flushed
    assert trainer.proc.wait(timeout=30) == -signal.SIGKILL

    [record] = cli_json(store_dir, "log")  # recovers it: no longer running
    assert record["status"] == "interrupted"
    assert record["error"] == "memostore.ProcessDied"
    assert record["args"] == {"lr": 0.5, "name": "killed"}
    shown = cli_json(store_dir, "show", record["id"])
    assert 30 <= count_of(shown) <= 35
    assert shown["metrics"]["loss"]["first"] == 1.0
    assert shown["args"] == {"lr": 0.5, "name": "killed"}  # from the stored arguments
    assert shown["code"]["deps"]
    assert running_evaluations() == []
    assert not list((store_dir / "journal").glob("*.journal"))

    # Killed before it logged anything: still recorded, as interrupted, without logs.
    early = child("memo", "early")
    early.send("kill")
    early.proc.wait(timeout=30)
    newest = cli_json(store_dir, "log")[0]
    assert (newest["status"], newest["args"]["name"], newest["logs"]) == (
        "interrupted",
        "early",
        None,
    )


@pytest.mark.parametrize("mode", ["memo", "run"])
def test_a_clean_exit_and_an_exception_keep_every_point(
    store_dir: Path, child: Any, mode: str
) -> None:
    ok = child(mode, "ok")
    ok.send("log 1000", "return")
    assert ok.wait() == 0
    failing = child(mode, "failing")
    assert failing.log(700) == 700  # a run starts with its first point
    live = cli_json(store_dir, "log", "train" if mode == "memo" else "trainer.py")[0]
    assert live["status"] == "running"
    assert live["function"] == ("__main__:train" if mode == "memo" else "run:trainer.py")
    failing.send("raise")
    assert failing.wait() == 1
    assert "RuntimeError: diverged" in failing.proc.stderr.read()  # type: ignore[union-attr]

    records = cli_json(store_dir, "log")
    assert [r["status"] for r in records] == ["error", "ok"]
    counts = [count_of(cli_json(store_dir, "show", r["id"])) for r in records]
    assert counts == [700, 1000]


def test_a_writer_on_another_host_is_running_until_its_heartbeat_is_old(
    store_dir: Path, child: Any
) -> None:
    trainer = child("memo", "remote", "elsewhere")
    assert trainer.log(3) == 3
    time.sleep(1.5)  # flushed by the timer
    trainer.kill()
    # Its lock is gone, but on another machine a lock proves nothing: the heartbeat
    # (the journal's mtime) is fresh, so it still runs as far as anyone here knows.
    [record] = cli_json(store_dir, "log")
    assert (record["status"], record["host"]) == ("running", "elsewhere")
    [journal] = (store_dir / "journal").glob("*.journal")
    old = time.time() - 3600
    os.utime(journal, (old, old))
    [record] = cli_json(store_dir, "log")
    assert record["status"] == "interrupted"
    assert count_of(cli_json(store_dir, "show", record["id"])) == 3


def memostore_exe() -> str:
    exe = Path(sys.executable).with_name("memostore")
    return str(exe) if exe.exists() else "memostore"


def start_follow(store_dir: Path, *args: str) -> tuple[subprocess.Popen[str], Lines]:
    proc = subprocess.Popen(
        [memostore_exe(), "--store", str(store_dir), "plot", *args, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, Lines(proc.stdout)


def test_plot_follow_draws_new_points_until_the_run_ends(store_dir: Path, child: Any) -> None:
    trainer = child("memo", "followed")
    trainer.log(3)
    proc, lines = start_follow(store_dir, "train", "--tag", "loss", "--interval", "0.1")
    try:
        lines.until("(3 points, running)")
        trainer.log(4)
        lines.until("(7 points, running)", timeout=LATENCY_S + 10)
        trainer.send("return")
        lines.until("(7 points)")
        assert "ended: ok (evaluation" in lines.until("ended")
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert trainer.wait() == 0


def test_ctrl_c_ends_plot_follow_cleanly(store_dir: Path, child: Any) -> None:
    trainer = child("memo", "interrupted")
    trainer.log(2)
    proc, lines = start_follow(store_dir, "train", "--tag", "loss", "--tag", "missing")
    try:
        lines.until("(2 points, running)")  # a tag not logged yet is waited for
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        errors = proc.stderr.read()
        assert "Traceback" not in errors and "Aborted" not in errors
    finally:
        proc.kill()
        proc.wait()
    # Without --follow a tag not logged yet is an error that names the tags there are.
    result = CliRunner().invoke(cli, ["--store", str(store_dir), "plot", "train", "--tag", "nope"])
    assert result.exit_code == 1
    assert "no tag 'nope'" in result.output and "loss" in result.output
    trainer.send("return")
    assert trainer.wait() == 0


def test_live_logs_name_tags_as_sealing_does(store_dir: Path, tmp_path: Path) -> None:
    from memostore import memo
    from memostore.metrics import SummaryWriter, metrics_summary

    seen: dict[str, Any] = {}

    @memo
    def mixed(n: int) -> int:
        w = SummaryWriter()
        w.add_text("x", "first as text", 0)
        for i in range(n):
            w.add_scalar("x", float(i), i)
            w.add_histogram("h", [float(i), i + 1.0, i + 2.0], i)
        w.add_scalar("nan", float("nan"), 0)
        w.flush()
        [run] = running_evaluations()
        with LiveLogs(run.path) as logs:
            logs.poll()
            seen["summary"] = logs.summary()
            seen["hist"] = logs.series("h")[1].tolist()
            seen["text"] = logs.events("x#text")
        return n

    mixed(5)
    sealed = metrics_summary(mixed.lookup(5).store, mixed.lookup(5).logs_id)
    live = seen["summary"]
    assert sorted(live) == sorted(sealed) == ["h", "nan", "x", "x#text"]
    for tag in ("h", "x", "x#text"):
        assert live[tag] == sealed[tag]
    assert live["nan"]["count"] == 1 and live["nan"]["nan_count"] == 1
    assert seen["hist"] == [float(i) + 1.0 for i in range(5)]
    assert [e["text"] for e in seen["text"]] == ["first as text"]


def test_gc_before_recovery_keeps_a_killed_calls_arguments(store_dir: Path, child: Any) -> None:
    from memostore import Store
    from memostore.lifecycle.maintenance import fsck, gc

    trainer = child("memo", "collected")
    trainer.log(4)
    time.sleep(1.0)
    trainer.kill()
    # Its pending marker is dropped (its writer is dead); its journal still names
    # the arguments and code it stored, so gc keeps them for the recovery.
    gc(Store(store_dir, create=False), grace_s=0.0)
    [record] = cli_json(store_dir, "log")
    assert record["status"] == "interrupted"
    shown = cli_json(store_dir, "show", record["id"])
    assert shown["args"] == {"lr": 0.5, "name": "collected"}
    assert shown["code"]["deps"] and count_of(shown) == 4
    report = fsck(Store(store_dir, create=False))
    assert not report.problems, report.problems
