"""A directory remote is walked without following links: push and pull stay inside it.

A teammate with write access to the shared directory plants symbolic links
(the refs directory, an ``objects/<fan>`` directory, one ref) pointing at
places of the victim's; the victim's push and pull must neither write nor
read through them, and must say which path is to blame.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_script, write_script

from memostore import Store
from memostore.transport import DirectoryTransport, NotFoundOnRemote, UnsafeRemotePath

from .fskit import assert_one_line_error, cli, tree_state

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
    return {"n": n, "s": "x" * n}


for arg in sys.argv[1:]:
    first(int(arg))
    second(int(arg))
"""


class Team:
    """Two stores (the victim's and a colleague's), a shared remote, an outside place."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script = write_script(root, "job.py", JOB)
        self.remote = root / "shared"
        self.outside = root / "victim-private"
        self.outside.mkdir()
        (self.outside / "notes.txt").write_text("private")

    def store(self, name: str) -> Path:
        return self.root / name

    def run(self, store: str, *args: str) -> str:
        env = {"MEMOSTORE_DIR": str(self.store(store))}
        return run_script(self.script, *args, env=env).stdout

    def object_ids(self, store: str) -> list[str]:
        return sorted(Store(self.store(store)).objects.iter_ids())


@pytest.fixture
def team(tmp_path: Path) -> Team:
    t = Team(tmp_path)
    t.run("A", "1", "2")
    return t


def _plant(link: Path, target: Path) -> None:
    """Replace *link* (a directory of the remote, if present) by a link to *target*."""
    if link.exists():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def test_push_through_a_linked_refs_directory_writes_nothing_there(team: Team) -> None:
    (team.remote).mkdir()
    (team.remote / "FORMAT").write_text("memostore 1\n")
    _plant(team.remote / "refs", team.outside)
    before = tree_state(team.outside)
    proc = cli(team.store("A"), "push", str(team.remote))
    assert_one_line_error(proc, "refs", "symbolic link")
    assert tree_state(team.outside) == before


def test_push_through_a_linked_objects_fan_writes_nothing_there(team: Team) -> None:
    fan = team.object_ids("A")[0][:2]
    (team.remote / "objects").mkdir(parents=True)
    (team.remote / "FORMAT").write_text("memostore 1\n")
    _plant(team.remote / "objects" / fan, team.outside)
    before = tree_state(team.outside)
    proc = cli(team.store("A"), "push", str(team.remote))
    assert_one_line_error(proc, f"objects/{fan}", "symbolic link")
    assert tree_state(team.outside) == before
    assert not any(p.name.startswith(fan) for p in team.outside.rglob("*"))


def test_pull_through_a_linked_refs_directory_fails_naming_it(team: Team) -> None:
    assert cli(team.store("A"), "push", str(team.remote)).returncode == 0
    moved = team.outside / "refs"
    shutil.move(team.remote / "refs", moved)
    _plant(team.remote / "refs", moved)
    proc = cli(team.store("B"), "pull", str(team.remote))
    assert_one_line_error(proc, "refs", "symbolic link")
    assert list(Store(team.store("B")).refs.iter("")) == []


def test_pull_skips_a_linked_ref_directory_and_takes_the_rest(team: Team) -> None:
    assert cli(team.store("A"), "push", str(team.remote)).returncode == 0
    evals = team.remote / "refs" / "evals"
    (first_dir,) = [p for p in evals.iterdir() if "first" in p.name]
    moved = team.outside / "planted"
    shutil.move(first_dir, moved)
    _plant(first_dir, moved)

    proc = cli(team.store("B"), "pull", str(team.remote), "--json")

    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    skipped_name = f"evals/{first_dir.name}"
    assert "symbolic link" in report["skipped"][skipped_name]
    assert proc.stderr.count("MemostoreWarning") == 1
    # Everything else came over: second() hits in B, first() runs.
    out = team.run("B", "1", "2")
    assert "BODY second" not in out and out.count("BODY first") == 2


def test_pull_skips_a_linked_ref_file(team: Team) -> None:
    assert cli(team.store("A"), "push", str(team.remote)).returncode == 0
    ref = next(p for p in (team.remote / "refs").rglob("*") if p.is_file() and "first" in str(p))
    secret = team.outside / "secret-ref"
    secret.write_bytes(ref.read_bytes())
    ref.unlink()
    ref.symlink_to(secret)

    proc = cli(team.store("B"), "pull", str(team.remote), "--json")

    assert proc.returncode == 0, proc.stderr
    skipped = json.loads(proc.stdout)["skipped"]
    (name,) = skipped
    assert ref.name in name and "symbolic link" in skipped[name]
    assert len(json.loads(proc.stdout)["refs_updated"]) == 3


def test_pull_with_a_linked_objects_fan_never_reads_through_it(team: Team) -> None:
    assert cli(team.store("A"), "push", str(team.remote)).returncode == 0
    store_a = Store(team.store("A"))
    (name, evaluation) = next((n, e) for n, e in store_a.refs.iter("evals/") if "first" in n)
    fan = evaluation[:2]
    fan_dir = team.remote / "objects" / fan
    moved = team.outside / "fan"
    shutil.move(fan_dir, moved)
    _plant(fan_dir, moved)

    proc = cli(team.store("B"), "pull", str(team.remote), "--json")

    b = Store(team.store("B"))
    # Nothing that lay behind the link reached the store.
    assert not any(i.startswith(fan) for i in b.objects.iter_ids())
    if proc.returncode == 0:
        # The evaluation itself lay behind it: that ref is skipped, the rest moved.
        assert "symbolic link" in json.loads(proc.stdout)["skipped"][name]
        assert b.refs.read(name) is None
    else:
        # An object below another ref's evaluation lay behind it: nothing is set.
        assert_one_line_error(proc, f"objects/{fan}", "symbolic link")
        assert list(b.refs.iter("")) == []


# -- every transport operation, on its own ------------------------------------------------
def _linked_remote(tmp_path: Path) -> tuple[DirectoryTransport, Path]:
    outside = tmp_path / "outside"
    (outside / "cd").mkdir(parents=True)
    (outside / "cd" / "ef").write_bytes(b"outside bytes")
    (outside / "ref").write_bytes(b"a" * 64 + b"\n")
    root = tmp_path / "remote"
    (root / "objects").mkdir(parents=True)
    (root / "objects" / "ab").symlink_to(outside, target_is_directory=True)
    (root / "refs").mkdir()
    (root / "refs" / "linked").symlink_to(outside / "ref")
    return DirectoryTransport(root, fsync=False), outside


OPERATIONS = {
    "put_bytes": lambda t, f: t.put_bytes("objects/ab/cd/ef", b"evil"),
    "put_file": lambda t, f: t.put_file("objects/ab/cd/ef", f),
    "add_if_new": lambda t, f: t.add_if_new("objects/ab/cd/new", b"evil"),
    "add_if_new linked": lambda t, f: t.add_if_new("objects/ab/cd/new", f, link=True),
    "get_bytes": lambda t, f: t.get_bytes("objects/ab/cd/ef"),
    "get_file": lambda t, f: t.get_file("objects/ab/cd/ef", f.with_name("dl")),
    "stat": lambda t, f: t.stat("objects/ab/cd/ef"),
    "delete": lambda t, f: t.delete("objects/ab/cd/ef"),
    "set_if_equals": lambda t, f: t.set_if_equals("objects/ab/cd/ef", b"outside bytes", b"x"),
    "list": lambda t, f: list(t.list("objects/ab/")),
    "get_bytes of a linked ref": lambda t, f: t.get_bytes("refs/linked"),
    "put_bytes over a linked ref": lambda t, f: t.put_bytes("refs/linked", b"b" * 64),
    "set_if_equals on a linked ref": lambda t, f: t.set_if_equals("refs/linked", None, b"b"),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_operation_refuses_a_link_inside_the_remote(tmp_path: Path, operation: str) -> None:
    transport, outside = _linked_remote(tmp_path)
    local = tmp_path / "local.bin"
    local.write_bytes(b"local bytes")
    before = tree_state(outside)
    with pytest.raises(UnsafeRemotePath) as info:
        OPERATIONS[operation](transport, local)
    assert info.value.name in ("objects/ab", "refs/linked")
    assert info.value.name in str(info.value) and "symbolic link" in str(info.value)
    assert tree_state(outside) == before
    assert not (tmp_path / "dl").exists()


def test_listing_names_links_so_that_reading_them_fails_loudly(tmp_path: Path) -> None:
    transport, _ = _linked_remote(tmp_path)
    assert sorted(transport.list("refs/")) == ["refs/linked"]
    assert sorted(transport.list("")) == ["objects/ab", "refs/linked"]


def test_a_fifo_on_the_remote_is_refused_without_blocking(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    (root / "refs").mkdir(parents=True)
    os.mkfifo(root / "refs" / "pipe")
    transport = DirectoryTransport(root)
    with pytest.raises(UnsafeRemotePath, match="not a regular file"):
        transport.get_bytes("refs/pipe")
    with pytest.raises(UnsafeRemotePath):
        transport.stat("refs/pipe")


def test_a_missing_name_is_still_not_found(tmp_path: Path) -> None:
    transport = DirectoryTransport(tmp_path / "remote")
    with pytest.raises(NotFoundOnRemote):
        transport.get_bytes("objects/ab/cd")
    transport.put_bytes("objects/ab", b"a file where a directory belongs")
    with pytest.raises(NotFoundOnRemote):
        transport.get_bytes("objects/ab/cd")
    assert transport.stat("objects/ab/cd") is None
