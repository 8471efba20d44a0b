"""One bad ref never stops a push or a pull: it is skipped, named, and the rest moves."""

from __future__ import annotations

import json
from pathlib import Path

import blake3
import pytest
from conftest import run_script, write_script

from memostore import Store
from memostore.errors import RefError
from memostore.odb.refs import check_ref_name

from .fskit import cli

JOB = """
import sys
import memostore


@memostore.memo
def first(n):
    print("BODY first", n, flush=True)
    return [n] * 100


@memostore.memo
def second(n):
    print("BODY second", n, flush=True)
    return {"n": n}


for arg in sys.argv[1:]:
    first(int(arg))
    second(int(arg))
"""

MISSING = "0f" * 32


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return write_script(tmp_path, "job.py", JOB)


def _run(job: Path, store: Path, *args: str) -> str:
    return run_script(job, *args, env={"MEMOSTORE_DIR": str(store)}).stdout


def _eval_dir(root: Path, function: str) -> Path:
    return next(p for p in (root / "refs" / "evals").iterdir() if function in p.name)


@pytest.mark.parametrize(
    "name",
    ["evals/f/abc\n", "evals/f/a b", "evals/f/../x", "evals//x", "/evals/x", "evals/f/x.lock"],
)
def test_check_ref_name_refuses_what_could_escape_or_collide(name: str) -> None:
    with pytest.raises(RefError):
        check_ref_name(name)


def test_pull_skips_bad_and_dangling_refs_and_takes_the_rest(job: Path, tmp_path: Path) -> None:
    a, remote = tmp_path / "A", tmp_path / "remote"
    _run(job, a, "1", "2")
    assert cli(a, "push", str(remote)).returncode == 0
    first_dir = _eval_dir(remote, "first")
    good = next(first_dir.iterdir()).read_bytes()
    (first_dir / ("ab" * 32 + "\n")).write_bytes(good)  # passes a "$"-anchored check
    (first_dir / ("cd" * 32)).write_bytes(MISSING.encode() + b"\n")  # dangling
    (first_dir / ("ef" * 32)).write_bytes(b"not an id\n")  # damaged

    proc = cli(tmp_path / "B", "pull", str(remote), "--json")

    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    base = f"evals/{first_dir.name}/"
    skipped = report["skipped"]
    assert set(skipped) == {base + "ab" * 32 + "\n", base + "cd" * 32, base + "ef" * 32}
    assert skipped[base + "ab" * 32 + "\n"] == "invalid ref name"
    assert "dangling" in skipped[base + "cd" * 32] and MISSING in skipped[base + "cd" * 32]
    assert "damaged" in skipped[base + "ef" * 32]
    assert len(report["refs_updated"]) == 4
    assert proc.stderr.count("MemostoreWarning") == 1 and "skipped 3 ref(s)" in proc.stderr
    # All four real evaluations arrived: nothing runs in B.
    assert "BODY" not in _run(job, tmp_path / "B", "1", "2")


def test_pull_summary_lists_each_skipped_ref(job: Path, tmp_path: Path) -> None:
    a, remote = tmp_path / "A", tmp_path / "remote"
    _run(job, a, "1")
    assert cli(a, "push", str(remote)).returncode == 0
    (_eval_dir(remote, "first") / ("cd" * 32)).write_bytes(MISSING.encode() + b"\n")
    proc = cli(tmp_path / "B", "pull", str(remote))
    assert proc.returncode == 0, proc.stderr
    assert "skipped ref evals/" in proc.stdout and "dangling" in proc.stdout


def test_push_skips_bad_and_dangling_local_refs_and_sends_the_rest(
    job: Path, tmp_path: Path
) -> None:
    a, remote = tmp_path / "A", tmp_path / "remote"
    _run(job, a, "1", "2")
    first_dir = _eval_dir(a, "first")
    (first_dir / ("cd" * 32)).write_bytes(MISSING.encode() + b"\n")  # names a missing object
    (first_dir / "bad name").write_bytes(next(first_dir.iterdir()).read_bytes())
    (first_dir / ("ef" * 32)).write_bytes(b"garbage")

    proc = cli(a, "push", str(remote), "--json")

    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    base = f"evals/{first_dir.name}/"
    assert set(report["skipped"]) == {base + "cd" * 32, base + "bad name", base + "ef" * 32}
    assert "missing" in report["skipped"][base + "cd" * 32]
    assert "invalid ref name" in report["skipped"][base + "bad name"]
    assert "damaged" in report["skipped"][base + "ef" * 32]
    assert len(report["refs_updated"]) == 4
    assert proc.stderr.count("MemostoreWarning") == 1
    assert not (remote / "refs" / base / ("cd" * 32)).exists()
    # What was pushed is whole: a fresh store pulls it and hits.
    assert cli(tmp_path / "C", "pull", str(remote)).returncode == 0
    assert "BODY" not in _run(job, tmp_path / "C", "1", "2")


def test_a_ref_with_a_newline_in_its_name_is_never_read_locally(job: Path, tmp_path: Path) -> None:
    a = tmp_path / "A"
    _run(job, a, "1")
    first_dir = _eval_dir(a, "first")
    (first_dir / ("ab" * 32 + "\n")).write_bytes(MISSING.encode() + b"\n")
    names = [n for n, _ in Store(a).refs.iter("")]
    assert all("\n" not in n for n in names) and len(names) == 2
    proc = cli(a, "fsck")
    assert proc.returncode == 1 and "invalid ref name" in proc.stdout
    assert cli(a, "log").returncode == 0


@pytest.mark.parametrize(
    "body",
    [b"[1]", b"[" * 100_000, b'{"links": 5}', b'{"links": {"doc": "ab"}}', b"\xff\xfe"],
    ids=["a list", "nested too deeply", "links a number", "links a string", "not utf-8"],
)
def test_pull_skips_a_ref_naming_a_malformed_document(
    job: Path, tmp_path: Path, body: bytes
) -> None:
    a, remote = tmp_path / "A", tmp_path / "remote"
    _run(job, a, "1")
    assert cli(a, "push", str(remote)).returncode == 0
    data = b"memostore:evaluation:1\n" + body
    object_id = blake3.blake3(data).hexdigest()
    path = remote / "objects" / object_id[:2] / object_id[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)  # well hashed, badly formed
    name = f"evals/{_eval_dir(remote, 'first').name}/" + "cd" * 32
    (remote / "refs" / name).write_text(object_id + "\n")

    proc = cli(tmp_path / "B", "pull", str(remote), "--json")

    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "damaged" in report["skipped"][name]
    assert len(report["refs_updated"]) == 2
