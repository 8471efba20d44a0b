"""Malformed files of a store's own (pending markers, config, refs, index) never crash
gc, fsck, log or config loading, and never make them read outside the store."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import run_script, write_script

from memostore import Store

from .fskit import assert_one_line_error, cli, tree_state

JOB = """
import memostore


@memostore.memo
def first(n):
    return [n] * 10


first(1)
first(2)
"""

ID = "ab" * 32


@pytest.fixture
def store(tmp_path: Path) -> Path:
    script = write_script(tmp_path, "job.py", JOB)
    path = tmp_path / "store"
    run_script(script, env={"MEMOSTORE_DIR": str(path)})
    # Garbage old enough for gc to free: an unreachable object from "last week".
    garbage = Store(path).objects.add_bytes(b"unreachable garbage")
    old = time.time() - 7 * 24 * 3600
    os.utime(path / "objects" / garbage[:2] / garbage[2:], (old, old))
    return path


def _ids(store: Path) -> set[str]:
    return set(Store(store).objects.iter_ids())


# -- pending markers ---------------------------------------------------------------------------
PENDING = {
    "a list": b"[1, 2]",
    "not json": b"{not json",
    "binary": b"\x00\xff\xfe" * 10,
    "roots that are paths": json.dumps(
        {"pid": 1, "host": "h", "started": time.time(), "roots": ["../../../../etc/passwd"]}
    ).encode(),
    "roots not a list": json.dumps(
        {"pid": 1, "host": "h", "started": time.time(), "roots": ID}
    ).encode(),
    "started not a number": json.dumps(
        {"pid": 1, "host": "h", "started": "yesterday", "roots": []}
    ).encode(),
    "pid not an int": json.dumps(
        {"pid": "1", "host": "h", "started": time.time(), "roots": []}
    ).encode(),
}


@pytest.mark.parametrize("case", sorted(PENDING))
def test_a_malformed_pending_marker_stops_gc_with_one_line(store: Path, case: str) -> None:
    marker = store / "pending" / "run.json"
    marker.parent.mkdir(exist_ok=True)
    marker.write_bytes(PENDING[case])
    before = _ids(store)

    proc = cli(store, "gc")

    assert_one_line_error(proc, str(marker), "delete that file")
    assert _ids(store) == before  # nothing deleted: what the marker keeps is unknown
    fsck = cli(store, "fsck")
    assert fsck.returncode == 1 and "Traceback" not in fsck.stderr
    assert "run.json" in fsck.stdout and "delete it" in fsck.stdout
    assert cli(store, "log").returncode == 0
    marker.unlink()
    done = cli(store, "gc")
    assert done.returncode == 0, done.stderr
    assert len(_ids(store)) == len(before) - 1  # then gc frees the garbage


def test_a_pending_marker_linked_elsewhere_is_never_read(store: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"pid": 1, "host": "h", "started": 0, "roots": []}))
    (store / "pending").mkdir(exist_ok=True)
    (store / "pending" / "run.json").symlink_to(elsewhere)
    proc = cli(store, "gc")
    assert_one_line_error(proc, "run.json", "cannot be read")
    assert elsewhere.exists()  # not followed (a stale marker would have been deleted)


# -- config.json ------------------------------------------------------------------------------
CONFIGS = {
    "a list": "[]",
    "a string": '"origin"',
    "not json": "{remotes",
    "remotes a list": '{"remotes": []}',
    "a remote a string": '{"remotes": {"origin": "s3://bucket"}}',
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_a_malformed_config_gives_one_line_naming_it(store: Path, case: str) -> None:
    (store / "config.json").write_text(CONFIGS[case])
    commands = [("remote", "list"), ("push",), ("pull",)]
    if case != "a remote a string":  # adding another remote leaves that one alone
        commands.append(("remote", "add", "backup", str(store.parent / "backup")))
    for args in commands:
        proc = cli(store, *args)
        assert_one_line_error(proc, "config.json")
        assert "fix" in proc.stderr or "remote remove" in proc.stderr
    assert cli(store, "log").returncode == 0
    fsck = cli(store, "fsck")
    if case in ("remotes a list", "a remote a string"):
        assert fsck.returncode == 0  # the file is an object: its remotes are checked on use
    else:
        assert fsck.returncode == 1 and "config.json" in fsck.stdout
    assert cli(store, "gc").returncode == 0


def test_a_malformed_config_never_stops_a_memoised_call(store: Path, tmp_path: Path) -> None:
    (store / "config.json").write_text("[]")
    script = write_script(tmp_path, "job.py", JOB + "\nprint('OK', first(3))\n")
    proc = run_script(script, env={"MEMOSTORE_DIR": str(store)})
    assert "OK [3, 3" in proc.stdout


# -- refs ----------------------------------------------------------------------------------------
def _eval_dir(store: Path) -> Path:
    return next((store / "refs" / "evals").iterdir())


def test_a_garbage_ref_stops_gc_and_is_reported(store: Path) -> None:
    ref = _eval_dir(store) / ID
    ref.write_bytes(b"\x00garbage\xff")
    before = _ids(store)
    assert_one_line_error(cli(store, "gc"), ID, "delete or repair that ref file")
    assert _ids(store) == before
    fsck = cli(store, "fsck")
    assert fsck.returncode == 1 and ID in fsck.stdout
    log = cli(store, "log")
    assert log.returncode == 0 and len(log.stdout.splitlines()) == 2


@pytest.mark.parametrize("kind", ["a link out of the store", "a FIFO", "an invalid name"])
def test_a_foreign_file_under_refs_is_reported_and_gc_goes_on(
    store: Path, tmp_path: Path, kind: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text(ID + "\n")
    before_outside = tree_state(outside)
    where = _eval_dir(store)
    if kind == "a link out of the store":
        (where / ID).symlink_to(outside / "target")
    elif kind == "a FIFO":
        os.mkfifo(where / ID)
    else:
        (where / (ID + "\n")).write_text(ID + "\n")
    before = _ids(store)

    gc = cli(store, "gc")  # would hang on the FIFO if it opened it

    assert gc.returncode == 0, gc.stderr
    assert len(_ids(store)) == len(before) - 1  # the garbage, and only it
    assert tree_state(outside) == before_outside
    fsck = cli(store, "fsck")
    assert fsck.returncode == 1 and "Traceback" not in fsck.stderr
    assert cli(store, "log").returncode == 0


# -- the evaluation index ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["binary", "wrong types", "a directory"])
def test_a_damaged_index_never_breaks_a_listing(store: Path, kind: str) -> None:
    index = store / "index" / "evaluations"
    evaluation = next(iter(Store(store).refs.iter("evals/")))[1]
    if kind == "a directory":
        index.unlink()
        index.mkdir()
    elif kind == "binary":
        index.write_bytes(b"\x00\xff" * 100 + b"\n{[\n")
    else:
        wrong = {"status": 5, "parents": 7, "args_summary": [1], "started": "yesterday"}
        index.write_text(json.dumps({"v": 1, "id": evaluation, "function": "f", **wrong}) + "\n")
    commands = [("log",), ("log", "--json"), ("show", evaluation[:12])]
    for args in [*commands, ("diff", "first", "first~1")]:
        proc = cli(store, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert len(cli(store, "log").stdout.splitlines()) == 2
    fsck = cli(store, "fsck")
    assert fsck.returncode == 0 and "Traceback" not in fsck.stderr
