"""Last-use tracking: hits and last use recorded across real processes.

Each scenario runs memoised calls in fresh interpreters (so the flush at exit,
the flush thread and fork handling are the real ones) and reads the record
back through ``memostore log`` / ``show`` and ``memostore.lifecycle.last_use``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.main import cli
from reliability.faultkit import read_only_view

from memostore import Store, memo
from memostore.lifecycle import last_use

LIB = """\
import sys
from memostore import memo


@memo
def square(x):
    print("RUN", x, flush=True)
    return x * x
"""

CALLS = """\
import sys
from lib import square

for arg in sys.argv[1:]:
    square(int(arg))
"""


@pytest.fixture
def project(tmp_path: Path, store_dir: Path) -> Path:
    write_script(tmp_path, "lib.py", LIB)
    write_script(tmp_path, "calls.py", CALLS)
    return tmp_path


def calls(project: Path, *args: int, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_script(project / "calls.py", *map(str, args), **kwargs)


def cli_json(store: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--store", str(store), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def by_x(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["args_summary"]["x"]: r for r in records}


def test_hits_are_counted_across_processes(project: Path, store_dir: Path) -> None:
    assert "RUN 3" in calls(project, 3).stdout
    # Two later processes: 3 hits, then 2 (and one new evaluation, never hit).
    assert "RUN" not in calls(project, 3, 3, 3).stdout
    assert calls(project, 3, 4, 3).stdout.count("RUN") == 1
    shown = cli_json(store_dir, "show", "lib:square~1")
    assert shown["args_summary"] == {"x": "3"}
    assert shown["hits"] == 5
    assert shown["last_used"] > shown["created"]
    listed = by_x(cli_json(store_dir, "log"))
    assert (listed["3"]["hits"], listed["4"]["hits"]) == (5, 0)
    # Stored but never hit: last used when it was stored, just after it was created.
    assert listed["4"]["last_used"] >= listed["4"]["created"]
    assert listed["4"]["last_used"] < listed["3"]["last_used"]


def test_log_sort_last_used(project: Path, store_dir: Path) -> None:
    calls(project, 1, 2, 3)
    calls(project, 1)  # 1 is the most recently used; 3 was stored after 2
    records = cli_json(store_dir, "log", "--sort", "last-used")
    assert [r["args_summary"]["x"] for r in records] == ["1", "3", "2"]
    assert [r["hits"] for r in records] == [1, 0, 0]
    ascending = cli_json(store_dir, "log", "--sort", "last-used", "--sort-order", "asc")
    assert [r["args_summary"]["x"] for r in ascending] == ["2", "3", "1"]
    # The default order (newest first) is unchanged, and so are its lines.
    assert [r["args_summary"]["x"] for r in cli_json(store_dir, "log")] == ["3", "2", "1"]
    plain = CliRunner().invoke(cli, ["--store", str(store_dir), "log"]).output
    assert "hit" not in plain
    lines = CliRunner().invoke(cli, ["--store", str(store_dir), "log", "--sort", "last-used"])
    assert lines.exit_code == 0, lines.output
    rows = lines.output.splitlines()
    assert "x=1" in rows[0] and rows[0].endswith("1 hit")
    assert "x=2" in rows[2] and rows[2].endswith("0 hits") and "used " in rows[2]
    both = CliRunner().invoke(cli, ["--store", str(store_dir), "log", "--sort", "created"])
    assert both.exit_code == 0 and both.output == plain
    clash = CliRunner().invoke(
        cli, ["--store", str(store_dir), "log", "--sort", "function", "--sort-by", "lr"]
    )
    assert clash.exit_code == 2 and "cannot be combined" in clash.output


def test_a_killed_process_loses_only_its_unflushed_notes(project: Path, store_dir: Path) -> None:
    calls(project, 7)
    script = write_script(
        project,
        "killed.py",
        """\
        import time
        from lib import square
        from memostore.lifecycle import last_use

        square(7)
        last_use.flush()       # this hit is on disk
        for _ in range(5):
            square(7)          # these wait for the next flush, which never comes
        print("ready", flush=True)
        time.sleep(60)
        """,
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=project, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    log = (store_dir / "usage" / "log").read_bytes()
    assert log.endswith(b"\n")
    for line in log.splitlines():
        entry = json.loads(line)
        assert set(entry) == {"id", "t", "hits"}
    assert by_x(cli_json(store_dir, "log"))["7"]["hits"] == 1
    # A later process's hits add up from there.
    calls(project, 7, 7)
    assert by_x(cli_json(store_dir, "log"))["7"]["hits"] == 3


def test_a_torn_line_is_skipped(project: Path, store_dir: Path) -> None:
    calls(project, 5, 5)
    log = store_dir / "usage" / "log"
    evaluation_id = cli_json(store_dir, "show", "lib:square")["id"]
    with open(log, "ab") as f:  # what a crash mid-write (or a full disk) leaves
        f.write(b'{"id":"' + evaluation_id.encode() + b'","t":17')
    assert cli_json(store_dir, "show", "lib:square")["hits"] == 1
    calls(project, 5)  # the next append starts on a line of its own
    assert cli_json(store_dir, "show", "lib:square")["hits"] == 2
    with open(log, "ab") as f:  # damage of other shapes reads as nothing too
        f.write(b'[1]\n{"id":"' + evaluation_id.encode() + b'","t":1,"hits":-4}\n\x00\xff\n')
    assert cli_json(store_dir, "show", "lib:square")["hits"] == 2


def test_a_read_only_store_still_hits(project: Path, tmp_path: Path, store_dir: Path) -> None:
    calls(project, 2)
    before = (store_dir / "usage" / "log").read_bytes()
    with read_only_view(store_dir.parent) as view:
        if view is None:
            pytest.skip("this machine allows no read-only bind mount")
        proc = calls(project, 2, 2, env={"MEMOSTORE_DIR": str(view / store_dir.name)})
        assert "RUN" not in proc.stdout and proc.stderr == ""
    assert (store_dir / "usage" / "log").read_bytes() == before


def test_a_failing_write_is_silent(project: Path, store_dir: Path) -> None:
    calls(project, 2)
    # usage/ taken by a file: every append fails (as on a full disk), and the call goes on.
    (store_dir / "usage" / "log").unlink()
    (store_dir / "usage").rmdir()
    (store_dir / "usage").write_text("not a directory")
    proc = calls(project, 2, 2)
    assert "RUN" not in proc.stdout and proc.stderr == ""
    assert by_x(cli_json(store_dir, "log"))["2"]["hits"] == 0


def test_forked_children_count_their_own_hits(project: Path, store_dir: Path) -> None:
    calls(project, 9)
    script = write_script(
        project,
        "forks.py",
        """\
        import multiprocessing, os
        from lib import square

        def child():
            square(9)
            square(9)

        if __name__ == "__main__":
            square(9)  # pending in the parent when it forks: the child must not repeat it
            ctx = multiprocessing.get_context("fork")
            p = ctx.Process(target=child)
            p.start()
            p.join()
            assert p.exitcode == 0
            pid = os.fork()
            if pid == 0:
                square(9)
                os._exit(0)  # no exit handlers: this hit is lost, nothing else is
            os.waitpid(pid, 0)
        """,
    )
    run_script(script)
    assert by_x(cli_json(store_dir, "log"))["9"]["hits"] == 3


def test_the_flush_thread_writes_while_the_process_runs(project: Path, store_dir: Path) -> None:
    calls(project, 6)
    script = write_script(
        project,
        "long.py",
        """\
        import sys, time
        from lib import square

        square(6)
        print("hit", flush=True)
        sys.stdin.readline()
        """,
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "hit"
        deadline = time.monotonic() + last_use.FLUSH_INTERVAL_S + 5
        hits = 0
        while time.monotonic() < deadline and hits == 0:
            time.sleep(0.2)
            hits = by_x(cli_json(store_dir, "log"))["6"]["hits"]
        assert hits == 1
    finally:
        proc.communicate("\n", timeout=30)


def test_several_stores_in_one_process(tmp_path: Path) -> None:
    stores = [Store(tmp_path / "a"), Store(tmp_path / "b"), Store.in_memory()]
    fns = [memo(store=s)(lambda x: x + 1) for s in stores]
    for fn in fns:
        fn(1)
    for _ in range(2):
        fns[0](1)
    fns[2](1)
    last_use.flush()
    hits = [[u.hits for u in last_use.load(s).values()] for s in stores]
    assert hits == [[2], [0], [1]]
    assert (tmp_path / "b" / "usage" / "log").is_file()


def test_compact_keeps_one_line_per_evaluation_not_dropped(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    fn = memo(store=store)(lambda x: -x)
    for x in (1, 2, 1, 1, 2, 3):
        fn(x)
    last_use.flush()
    uses = last_use.load(store)
    keep = [fn.lookup(1).id, fn.lookup(3).id]  # type: ignore[union-attr]
    last_use.compact(store, [fn.lookup(2).id])  # type: ignore[union-attr]
    lines = (tmp_path / "s" / "usage" / "log").read_bytes().splitlines()
    assert len(lines) == 2
    assert last_use.load(store) == {eid: uses[eid] for eid in keep}


def test_gc_and_fsck_leave_the_record_alone(project: Path, store_dir: Path) -> None:
    calls(project, 8, 8)
    log = (store_dir / "usage" / "log").read_bytes()
    for command in ("gc", "fsck"):
        result = CliRunner().invoke(cli, ["--store", str(store_dir), command])
        assert result.exit_code == 0, result.output
        assert "usage" not in result.output
    assert (store_dir / "usage" / "log").read_bytes() == log
    assert os.listdir(store_dir / "usage") == ["log"]
