"""gc policies: eviction by last use, --keep-last, ages, tags, dry runs, concurrent
writers and readers, the max-size setting enforced in the background, and gc of remotes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script
from memostore_cli.main import cli

from memostore.odb.store import Store
from memostore.transport import open_transport

LIB = """\
import numpy as np
from memostore import memo


@memo
def make(n):
    print("RUN make", n, flush=True)
    return np.full(n, n, dtype=np.float64)


@memo
def other(n):
    print("RUN other", n, flush=True)
    return np.full(n, -n, dtype=np.float64)
"""

# run.py FUNCTION N...: call it on each N; print whether it ran, its id and a checksum.
RUN = """\
import sys
import lib

fn = getattr(lib, sys.argv[1])
for text in sys.argv[2:]:
    n = int(text)
    value = fn(n)
    assert value.shape == (n,) and float(value[0]) == (n if fn is lib.make else -n), "BAD"
    print("ID", n, fn.lookup(n).id, flush=True)
"""

N = 100_000  # 800 KB per evaluation: the arrays dominate every size below
ONE = N * 8


class Project:
    """A directory with lib.py and run.py, and a store of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "lib.py").write_text(LIB)
        (root / "run.py").write_text(RUN)
        self.store = root / "store"
        self.env = {"MEMOSTORE_DIR": str(self.store)}

    def run(self, fn: str, *ns: int) -> dict[int, tuple[bool, str]]:
        """{n: (ran, evaluation id)} of calling *fn* on each n in a fresh process."""
        out = run_script(self.root / "run.py", fn, *map(str, ns), env=self.env).stdout
        ran = {int(line.split()[2]) for line in out.splitlines() if line.startswith("RUN")}
        ids = {}
        for line in out.splitlines():
            if line.startswith("ID"):
                _, n, eid = line.split()
                ids[int(n)] = (int(n) in ran, eid)
        return ids

    def cli(self, *args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", str(self.store), *args])

    def gc_json(self, *args: str) -> dict[str, Any]:
        result = self.cli("gc", "--json", *args)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def fsck_ok(self) -> None:
        result = self.cli("fsck")
        assert result.exit_code == 0, result.output

    def refs(self) -> dict[str, str]:
        return dict(Store(self.store).refs.iter(""))

    def object_files(self) -> set[str]:
        found = set()
        for dirpath, _, files in os.walk(self.store / "objects"):
            found.update(os.path.join(dirpath, f) for f in files)
        return found


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


def evicted_ids(report: dict[str, Any]) -> set[str]:
    return {e["id"] for e in report["eviction"]["evicted"]}


def test_max_size_evicts_least_recently_used_first(project: Project) -> None:
    a = project.run("make", N)[N][1]
    b = project.run("make", N + 1)[N + 1][1]
    c = project.run("make", N + 2)[N + 2][1]
    assert project.run("make", N) == {N: (False, a)}  # a hit: now a is the most recent
    report = project.gc_json("--max-size", str(int(ONE * 1.5)), "--grace", "0")
    assert evicted_ids(report) == {b, c}
    assert [e["id"] for e in report["eviction"]["evicted"]] == [b, c]  # oldest use first
    assert report["objects_deleted"] >= 2 and report["bytes_freed"] >= 2 * ONE
    assert project.run("make", N) == {N: (False, a)}  # kept: still a hit
    assert project.run("make", N + 1)[N + 1][0] is True  # evicted: computed again
    project.fsck_ok()


def test_tagged_evaluation_survives_any_limit(project: Project) -> None:
    from memostore.odb.tags import set_tag

    ids = {n: eid for n, (_, eid) in project.run("make", N, N + 1).items()}
    set_tag(Store(project.store), "keep", ids[N])
    report = project.gc_json("--max-size", "1", "--grace", "0")
    assert evicted_ids(report) == {ids[N + 1]}
    assert report["eviction"]["protected"] == {"tagged": 1}
    assert report["eviction"]["over_limit"] is True
    assert project.run("make", N) == {N: (False, ids[N])}
    project.fsck_ok()


def test_keep_last_per_function(project: Project) -> None:
    made = [project.run("make", N + i)[N + i][1] for i in range(3)]
    kept_other = project.run("other", 10)[10][1]
    project.run("make", N)  # the first becomes the most recently used
    report = project.gc_json("--keep-last", "1", "--grace", "0")
    assert evicted_ids(report) == {made[1], made[2]}
    assert {e["reason"] for e in report["eviction"]["evicted"]} == {"keep-last"}
    assert project.run("make", N) == {N: (False, made[0])}
    assert project.run("other", 10) == {10: (False, kept_other)}


def test_older_than_uses_creation_and_unused_for_uses_last_use(project: Project) -> None:
    ids = {n: eid for n, (_, eid) in project.run("make", 1, 2).items()}
    time.sleep(2.5)  # 1 and 2 were created (and last used) before this
    later = time.time()  # 3 is created, and 1 used, after this
    ids[3] = project.run("make", 3)[3][1]
    project.run("make", 1)  # used now, created long ago

    def between() -> str:
        # An age older than anything done after `later` and younger than 1 and 2,
        # however slowly the processes above ran: of the 2.5 s gap, 1.5 s are left
        # for the gc command to reach its clock.
        return f"{time.time() - later + 1.0:.3f}"

    unused = project.gc_json("--unused-for", between(), "--grace", "0", "--dry-run")
    assert evicted_ids(unused) == {ids[2]}
    older = project.gc_json("--older-than", between(), "--grace", "0", "--dry-run")
    assert evicted_ids(older) == {ids[1], ids[2]}
    assert {e["reason"] for e in older["eviction"]["evicted"]} == {"older-than"}
    # The grace period protects what was created or used within it.
    graced = project.gc_json("--older-than", between(), "--grace", "1h", "--dry-run")
    assert evicted_ids(graced) == set()
    assert graced["eviction"]["protected"] == {"young": 2}
    done = project.gc_json("--unused-for", between(), "--grace", "0")
    assert evicted_ids(done) == {ids[2]}
    assert set(project.refs().values()) == {ids[1], ids[3]}


def test_dry_run_changes_nothing(project: Project) -> None:
    project.run("make", N, N + 1, N + 2)
    refs, files = project.refs(), project.object_files()
    result = project.cli("gc", "--max-size", "1", "--grace", "0", "--dry-run")
    assert result.exit_code == 0, result.output
    assert sum(line.startswith("would evict ") for line in result.output.splitlines()) == 3
    assert "would evict 3 evaluation(s)" in result.output
    # The sweep ran before any ref went: its count is labelled as today's garbage only.
    assert "besides the eviction, would free 0 object(s)" in result.output
    assert project.refs() == refs and project.object_files() == files
    report = project.gc_json("--max-size", "1", "--grace", "0", "--dry-run")
    assert report["eviction"]["bytes_evicted"] >= 3 * ONE
    assert project.refs() == refs and project.object_files() == files


# The children run until the test creates the stop file (argv[1]), and say when
# they are under way: gc starts only once both are, so the three overlap by
# construction, not by a sleep that hopes so. The hour is a guard, not a timing.
WRITER = """\
import os, sys, time
import lib

stop, guard, n = sys.argv[1], time.time() + 3600, 200
while (n < 203 or not os.path.exists(stop)) and time.time() < guard:
    lib.make(n)
    print("STORED", n, lib.make.lookup(n).id, flush=True)
    n += 1
"""

READER = """\
import os, sys, time
import lib

stop, guard, n, count = sys.argv[1], time.time() + 3600, int(sys.argv[2]), 0
while (count == 0 or not os.path.exists(stop)) and time.time() < guard:
    value = lib.make(n)
    assert value.shape == (n,) and float(value[0]) == n, "BAD VALUE"
    if count == 0:
        print("READING", flush=True)
    count += 1
print("READS", count, flush=True)
"""


def _read_until(proc: subprocess.Popen, prefix: str) -> str:
    """The child's output up to and including its first line that starts with *prefix*."""
    assert proc.stdout is not None
    lines = ""
    while not (line := proc.stdout.readline()).startswith(prefix):
        assert line, f"the child ended before saying {prefix}: {lines}"
        lines += line
    return lines + line


def test_concurrent_writers_and_readers_lose_nothing(project: Project) -> None:
    old = {n: eid for n, (_, eid) in project.run("make", N + 1, N + 2, N + 3).items()}
    kept = project.run("make", N)[N][1]
    time.sleep(2.1)  # past the grace period below
    project.run("make", N)  # kept is the most recently used
    (project.root / "writer.py").write_text(WRITER)
    (project.root / "reader.py").write_text(READER)
    env = {**os.environ, **project.env}
    stop = project.root / "stop"
    procs = [
        subprocess.Popen(
            [sys.executable, str(project.root / script), *args],
            cwd=project.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script, args in (("writer.py", [str(stop)]), ("reader.py", [str(stop), str(N)]))
    ]
    try:
        written = _read_until(procs[0], "STORED")  # the writer has published one result
        _read_until(procs[1], "READING")  # and the reader has read one
        report = project.gc_json("--max-size", str(int(ONE * 1.5)), "--grace", "2")
    finally:
        stop.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    outputs[0] = (written + outputs[0][0], outputs[0][1])
    assert evicted_ids(report) == set(old.values())
    stored = [line.split() for line in outputs[0][0].splitlines() if line.startswith("STORED")]
    assert len(stored) >= 3
    assert int(outputs[1][0].split()[1]) > 0
    # Every result published during gc is kept and hits, as does the kept one.
    ns = [int(n) for _, n, _ in stored]
    hits = project.run("make", *ns, N)
    assert hits == {**{int(n): (False, eid) for _, n, eid in stored}, N: (False, kept)}
    project.fsck_ok()


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.1)


def test_config_max_size_is_enforced_in_the_background(project: Project) -> None:
    ids = [project.run("make", N + i)[N + i][1] for i in range(3)]
    project.run("make", N)  # the first is now the most recently used
    result = project.cli("config", "max-size", f"{ONE * 3 // 2 // 1024}K")
    assert result.exit_code == 0, result.output
    assert project.cli("config", "gc-grace", "1s").exit_code == 0
    assert project.cli("config", "max-size").output.strip() == f"{ONE * 3 // 2 // 1024}K"
    time.sleep(1.1)
    started = time.perf_counter()
    project.run("make", 5)  # a stored miss: starts the enforcer and returns
    assert time.perf_counter() - started < 10
    log = project.store / "logs" / "evict.log"
    wait_for(log.exists)
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["evicted"] == 2 and record["error"] is None
    assert set(record["evaluations"]) == {ids[1], ids[2]}
    assert record["bytes_after"] <= record["max_size"]
    assert set(project.refs().values()) >= {ids[0]}
    assert not set(project.refs().values()) & {ids[1], ids[2]}
    # The next command prints the notice once.
    first = project.cli("config", "max-size")
    assert "evicted 2 least recently used evaluation(s)" in first.stderr
    assert "evicted" not in project.cli("config", "max-size").stderr
    assert project.cli("config", "--unset", "max-size").exit_code == 0
    assert "not set" in project.cli("config", "max-size").output
    project.fsck_ok()


# One process that keeps storing: its first store starts the enforcer; a store after
# the enforcer evicted warns this process (the check interval is shortened to 0.2 s).
KEEPS_STORING = """\
import json, os, sys, time, warnings
import lib
from memostore.lifecycle import trigger

trigger.CHECK_INTERVAL_S = 0.2
log = os.path.join(os.environ["MEMOSTORE_DIR"], "logs", "evict.log")
lib.make(int(sys.argv[1]))  # over the limit now: starts the enforcer
deadline = time.monotonic() + 60
while not os.path.exists(log) or str(os.getpid()) not in open(log).read():
    assert time.monotonic() < deadline, "the enforcer never logged"
    time.sleep(0.1)
print("LOGGED", json.loads(open(log).read().splitlines()[-1])["started_by"], os.getpid())
time.sleep(0.3)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lib.make(int(sys.argv[1]) + 1)  # the next check reads the log
for w in caught:
    print("WARNING", w.category.__name__, w.message)
"""


def test_the_process_whose_store_started_the_enforcer_is_warned(project: Project) -> None:
    for i in range(3):
        project.run("make", N + i)
    assert project.cli("config", "max-size", f"{ONE * 3 // 2 // 1024}K").exit_code == 0
    assert project.cli("config", "gc-grace", "1s").exit_code == 0
    time.sleep(1.1)
    script = project.root / "keeps_storing.py"
    script.write_text(KEEPS_STORING)
    out = run_script(script, "7", env=project.env).stdout
    logged = next(line.split() for line in out.splitlines() if line.startswith("LOGGED"))
    assert logged[1] == logged[2]  # the record names the process that started it
    warned = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1, out
    assert "MemostoreWarning" in warned[0] and "least recently used" in warned[0], out
    project.fsck_ok()


def test_config_rejects_bad_keys_and_values(project: Project) -> None:
    project.run("make", 3)
    bad_key = project.cli("config", "max-sise", "5G")
    assert bad_key.exit_code == 1 and "unknown setting 'max-sise'" in bad_key.output
    bad_value = project.cli("config", "max-size", "lots")
    assert bad_value.exit_code == 1 and "not a size" in bad_value.output
    assert project.cli("config", "max-size", "50G").exit_code == 0
    config = json.loads((project.store / "config.json").read_text())
    assert config["settings"] == {"max-size": 50 << 30}


def age_store_files(store: Path, seconds: float) -> None:
    """Date every object file back, as if written *seconds* ago."""
    when = time.time() - seconds
    for dirpath, _, files in os.walk(store / "objects"):
        for name in files:
            os.utime(os.path.join(dirpath, name), (when, when))


def remote_gc_round(project: Project, url: str) -> None:
    ids = {n: eid for n, (_, eid) in project.run("make", N, N + 1, N + 2).items()}
    assert project.cli("remote", "add", "origin", url).exit_code == 0
    assert project.cli("push", "origin").exit_code == 0, "push failed"
    dry = project.gc_json(
        "--remote", "origin", "--max-size", str(int(ONE * 1.5)), "--grace", "0", "--dry-run"
    )
    assert evicted_ids({"eviction": dry["eviction"]}) == {ids[N], ids[N + 1]}  # oldest created
    with open_transport(url) as transport:
        before = set(transport.list(""))
    report = project.gc_json(
        "--remote", "origin", "--max-size", str(int(ONE * 1.5)), "--grace", "0"
    )
    assert report["objects_deleted"] == dry["objects_deleted"] >= 2
    assert report["bytes_freed"] >= 2 * ONE
    with open_transport(url) as transport:
        after = set(transport.list(""))
        refs = {n for n in after if n.startswith("refs/")}
    assert before - after and not after - before
    assert len(refs) == 1
    # What is left on the remote is whole: a fresh store pulls it and hits.
    fresh = Project(project.root.parent / "fresh")
    assert fresh.cli("pull", url).exit_code == 0
    assert fresh.run("make", N + 2) == {N + 2: (False, ids[N + 2])}
    fresh.fsck_ok()


def test_gc_remote_directory(project: Project, tmp_path: Path) -> None:
    remote_gc_round(project, str(tmp_path / "remote"))


def test_gc_remote_keeps_what_a_push_in_progress_sent(project: Project, tmp_path: Path) -> None:
    url = str(tmp_path / "remote")
    project.run("make", N)
    age_store_files(project.store, 7200)  # old store files, hard-linked by the push
    assert project.cli("push", url).exit_code == 0
    with open_transport(url) as transport:
        # As if the push had sent its objects but not yet its ref.
        for name in list(transport.list("refs/")):
            transport.delete(name)
        objects = set(transport.list("objects/"))
    kept = project.gc_json("--remote", url, "--grace", "1h")
    assert kept["objects_deleted"] == 0 and kept["kept_young"] == len(objects)
    freed = project.gc_json("--remote", url, "--grace", "0")
    assert freed["objects_deleted"] == len(objects)


@pytest.mark.s3
def test_gc_remote_s3(project: Project, s3_bucket: str) -> None:
    remote_gc_round(project, s3_bucket)


def test_gc_remote_sends_back_what_a_concurrent_push_relied_on(
    project: Project, tmp_path: Path
) -> None:
    from memostore.lifecycle.remote_gc import gc_remote
    from memostore.transport import DirectoryTransport

    ids = {n: eid for n, (_, eid) in project.run("make", N, N + 1).items()}
    url = str(tmp_path / "remote")
    assert project.cli("push", url).exit_code == 0
    with open_transport(url) as transport:
        refs = {n: transport.get_bytes(n) for n in transport.list("refs/")}
    ref_b = next(n for n, raw in refs.items() if raw.decode().strip() == ids[N + 1])
    pushed: list[str] = []

    class PushDuringGc(DirectoryTransport):
        """A remote on which another machine's push publishes a ref as gc deletes."""

        def delete(self, name: str) -> None:
            super().delete(name)
            if name.startswith("objects/") and not pushed:
                # The push found B's objects present, skipped them, and writes its ref now.
                pushed.append(name)
                self.set_if_equals(ref_b, None, refs[ref_b])

    with open_transport(url) as plain:
        plain.delete(ref_b)  # B's objects are unreachable garbage on the remote
    report = gc_remote(Store(project.store), PushDuringGc(tmp_path / "remote"), grace_s=0)
    assert pushed and report.objects_deleted >= 2
    assert report.restored and not report.damaged_refs
    fresh = Project(project.root.parent / "fresh")
    assert fresh.cli("pull", url).exit_code == 0
    assert fresh.run("make", N, N + 1) == {N: (False, ids[N]), N + 1: (False, ids[N + 1])}
    fresh.fsck_ok()


def test_an_evaluation_whose_call_is_being_computed_is_not_evicted(project: Project) -> None:
    from memostore.odb.leases import lease_path, try_create

    ids = {n: eid for n, (_, eid) in project.run("make", N, N + 1).items()}
    ref = next(n for n, eid in project.refs().items() if eid == ids[N] and n.startswith("evals/"))
    _, function, key = ref.split("/", 2)
    # This process holds the call's lease, as one computing it again right now does.
    lease = try_create(str(project.store), lease_path(str(project.store), ref), function, key)
    assert lease is not None
    try:
        report = project.gc_json("--max-size", "1", "--grace", "0")
    finally:
        lease.release()
    assert evicted_ids(report) == {ids[N + 1]}
    assert report["eviction"]["protected"] == {"running": 1}


def lease_record(key: str, heartbeat: float, expires_s: float) -> bytes:
    """A remote lease's record, as a holder on another machine writes it."""
    record = {
        "host": "elsewhere",
        "pid": 4242,
        "process_started": heartbeat,
        "id": os.urandom(16).hex(),
        "function": "lib.make",
        "key": key,
        "started": heartbeat,
        "heartbeat": heartbeat,
        "heartbeat_s": 5.0,
        "expires_s": expires_s,
    }
    return json.dumps(record, sort_keys=True).encode() + b"\n"


def marker_record(lease_id: str | None) -> bytes:
    record = {"host": "elsewhere", "pid": 4343, "since": time.time(), "lease": lease_id}
    return json.dumps(record, sort_keys=True).encode() + b"\n"


def remote_leases_round(project: Project, url: str, *, young: bool) -> dict[str, str]:
    """gc of a remote removes a stale lease and the markers of gone waiters, keeps the rest.

    With *young*, also a marker written just before gc, kept (where the remote dates
    names finely enough: S3 gives whole seconds).

    Returns the names of the leases it wrote: stale, live and orphan (only markers).
    """
    from memostore.remote.lease_waiters import waiting_prefix
    from memostore.remote.leases import lease_name

    ids = {n: eid for n, (_, eid) in project.run("make", 1, 2, 3).items()}
    assert project.cli("push", url).exit_code == 0
    refs = {eid: n for n, eid in project.refs().items() if n.startswith("evals/")}
    stale, live, orphan = (lease_name(refs[ids[n]]) for n in (1, 2, 3))
    gone = {waiting_prefix(stale) + "w-1-aa", waiting_prefix(orphan) + "w-3-cc"}
    kept = {live, waiting_prefix(live) + "w-2-bb"}
    if young:
        kept.add(waiting_prefix(orphan) + "w-4-dd")
    with open_transport(url) as transport:
        # A holder that died an hour ago (expiry 0.5 s), and a waiter killed beside it.
        transport.put_bytes(stale, lease_record(stale, time.time() - 3600, 0.5))
        # Waiters: one killed beside the dead holder, one that waits (never refreshed)
        # for a live holder, one killed after the lease it waited for was released.
        for name in sorted(gone | {waiting_prefix(live) + "w-2-bb"}):
            transport.put_bytes(name, marker_record(None))
        time.sleep(1.2)  # all of the above older than the grace period (1 s)
        transport.put_bytes(live, lease_record(live, time.time(), 30.0))
        if young:  # just written, beside no lease: too young to judge
            transport.put_bytes(waiting_prefix(orphan) + "w-4-dd", marker_record(None))
        assert set(transport.list("leases/")) == {stale} | gone | kept
    args = ("--remote", url, "--max-size", "1", "--grace", "1")
    text = project.cli("gc", *args, "--dry-run")
    assert text.exit_code == 0, text.output
    assert "would delete 1 stale lease(s) and 2 waiter marker(s)" in text.output
    dry = project.gc_json(*args, "--dry-run")
    assert (dry["leases_removed"], dry["markers_removed"]) == (1, 2)
    report = project.gc_json(*args)
    # The live lease protects its evaluation; the stale one and markers alone do not.
    assert evicted_ids({"eviction": report["eviction"]}) == {ids[1], ids[3]}
    assert report["eviction"]["protected"] == {"running": 1}
    assert (report["leases_removed"], report["markers_removed"]) == (1, 2)
    with open_transport(url) as transport:
        assert set(transport.list("leases/")) == kept
    return {"stale": stale, "live": live, "orphan": orphan}


def test_gc_remote_removes_stale_leases_and_orphan_markers(
    project: Project, tmp_path: Path
) -> None:
    remote = tmp_path / "remote"
    leases = remote_leases_round(project, str(remote), young=True)
    # The empty directory of the deleted markers goes; those still in use stay.
    function_dir = remote / leases["live"].rsplit("/", 1)[0]
    live, orphan = (leases[k].rsplit("/", 1)[1] for k in ("live", "orphan"))
    assert {p.name for p in function_dir.iterdir()} == {
        live,
        f"{live}.waiting",
        f"{orphan}.waiting",
    }
    # With every lease released, gc leaves leases/ itself, empty.
    with open_transport(str(remote)) as transport:
        for name in list(transport.list("leases/")):
            transport.delete(name)
    report = project.gc_json("--remote", str(remote), "--grace", "0")
    assert (report["leases_removed"], report["markers_removed"]) == (0, 0)
    assert list((remote / "leases").iterdir()) == []


@pytest.mark.s3
def test_gc_remote_s3_removes_stale_leases_and_orphan_markers(
    project: Project, s3_bucket: str
) -> None:
    remote_leases_round(project, s3_bucket, young=False)


def test_directory_remote_writes_where_gc_pruned_the_directory_meanwhile(tmp_path: Path) -> None:
    from memostore.transport import DirectoryTransport

    pruned: list[int] = []

    class PrunedMeanwhile(DirectoryTransport):
        """gc removes the empty directories between a writer's walk and its write."""

        def _write_temp(self, dir_fd: int, leaf: str, data: bytes | Path) -> str:
            if len(pruned) < 2:  # twice: a writer may be unlucky more than once
                pruned.append(self.remove_empty_dirs("leases/"))
            return super()._write_temp(dir_fd, leaf, data)

    writes = (
        lambda remote, name: remote.put_bytes(name, b"put"),
        lambda remote, name: remote.add_if_new(name, b"put"),
        lambda remote, name: remote.set_if_equals(name, None, b"put"),
    )
    for i, write in enumerate(writes):
        pruned.clear()
        root = tmp_path / f"remote{i}"
        remote = PrunedMeanwhile(root)
        name = "leases/f/key.waiting/w-1"
        write(remote, name)
        assert pruned == [2, 2]  # key.waiting/ and f/, made anew by each walk
        assert remote.get_bytes(name) == b"put"
        remote.delete(name)
        assert remote.remove_empty_dirs("leases/") == 2
        assert list((root / "leases").iterdir()) == []
