"""Links planted inside the local store's ``objects/`` and ``refs/`` are never followed.

Whoever can write to a shared store can replace one of its directories (or a
ref file) by a symbolic link to a place of the victim's. The victim's calls
must neither read nor write (nor touch, nor delete) through it, must say
which file is to blame and how to find the others, and ``fsck`` must list it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import run_script, write_script

from memostore import Store

from .fskit import cli, tree_state

JOB = """
import sys
import memostore


@memostore.memo
def first(n):
    print("BODY first", n, flush=True)
    return {"rows": [n] * 50, "raw": bytes([n % 256]) * 100_000}


print("RESULT", len(first(int(sys.argv[1]))["raw"]))
"""


class Victim:
    """A store that computed first(1), a place outside it the attacker aims at."""

    def __init__(self, root: Path) -> None:
        self.script = write_script(root, "job.py", JOB)
        self.store = root / "store"
        self.outside = root / "victim-private"
        self.outside.mkdir()
        (self.outside / "notes.txt").write_text("private")
        assert "BODY first 1" in self.run("1").stdout

    def run(self, *args: str) -> object:
        return run_script(self.script, *args, env={"MEMOSTORE_DIR": str(self.store)})

    def ref(self) -> tuple[str, Path]:
        (name,) = [n for n, _ in Store(self.store).refs.iter("evals/")]
        return name, self.store / "refs" / name

    def fsck_problems(self) -> list[dict[str, str]]:
        proc = cli(self.store, "fsck", "--json")
        assert proc.returncode != 0, proc.stdout
        return json.loads(proc.stdout)["problems"]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "MemostoreWarning" in line]


def test_a_linked_objects_fan_is_never_read_written_or_touched(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    objects = victim.store / "objects"
    fans = sorted(p.name for p in objects.iterdir())
    # Move every fan out (the attacker's copy keeps valid objects) and link each back;
    # link every fan not yet used too, so that new objects meet links only.
    planted = victim.outside / "planted"
    planted.mkdir()
    for fan in fans:
        shutil.move(objects / fan, planted / fan)
    for i in range(256):
        fan = f"{i:02x}"
        (planted / fan).mkdir(exist_ok=True)
        (objects / fan).symlink_to(planted / fan, target_is_directory=True)
    before = tree_state(victim.outside)

    again = victim.run("1")  # the hit's objects lie behind the links: a recompute
    fresh = victim.run("2")  # new objects: every fan they need is a link

    assert "BODY first 1" in again.stdout and "RESULT 100000" in again.stdout
    assert "BODY first 2" in fresh.stdout and "RESULT 100000" in fresh.stdout
    assert tree_state(victim.outside) == before, "read, wrote or touched through a link"
    for proc in (again, fresh):
        assert "Traceback" not in proc.stderr
        assert any("symbolic link" in w and "memostore fsck" in w for w in _warnings(proc.stderr))
    problems = victim.fsck_problems()
    linked = {p["name"] for p in problems if p["kind"] == "link"}
    assert {f"objects/{i:02x}" for i in range(256)} <= linked
    assert tree_state(victim.outside) == before
    gc = cli(victim.store, "gc", "--grace", "0")  # never lists, nor deletes, through them
    assert tree_state(victim.outside) == before, gc.stdout + gc.stderr


def test_a_linked_ref_file_is_refused_naming_it_and_fsck(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    name, path = victim.ref()
    secret = victim.outside / "ref-copy"
    secret.write_bytes(path.read_bytes())  # a valid ref: following it would "work"
    path.unlink()
    path.symlink_to(secret)
    before = tree_state(victim.outside)

    proc = victim.run("1")

    assert "BODY first 1" in proc.stdout  # refused: a miss
    (warning,) = [w for w in _warnings(proc.stderr) if "symbolic link" in w]
    assert str(path) in warning and "memostore fsck" in warning
    assert tree_state(victim.outside) == before
    assert not path.is_symlink()  # the recompute replaced the link by a ref of its own
    path.unlink()
    path.symlink_to(secret)
    problems = victim.fsck_problems()
    assert any(p["kind"] == "ref" and p["name"] == name for p in problems), problems
    show = cli(victim.store, "show", "first")
    assert "Traceback" not in show.stderr
    assert tree_state(victim.outside) == before


def test_a_linked_ref_directory_is_never_read_nor_written(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    _, path = victim.ref()
    function_dir = path.parent
    planted = victim.outside / "planted-refs"
    shutil.move(function_dir, planted)
    function_dir.symlink_to(planted, target_is_directory=True)
    before = tree_state(victim.outside)

    proc = victim.run("1")
    other = victim.run("3")

    assert "BODY first 1" in proc.stdout and "BODY first 3" in other.stdout
    assert tree_state(victim.outside) == before, "read or wrote through the link"
    warnings = _warnings(proc.stderr)
    assert any(str(function_dir) in w and "memostore fsck" in w for w in warnings), warnings
    assert "Traceback" not in proc.stderr + other.stderr
    problems = victim.fsck_problems()
    rel = function_dir.relative_to(victim.store).as_posix()
    assert any(p["kind"] == "link" and p["name"] == rel for p in problems), problems
    assert cli(victim.store, "log").returncode == 0
    assert tree_state(victim.outside) == before
