"""A stored snapshot is data: restoring one never writes, follows or serves anything else.

Each test runs the victim's script in a fresh process, as a user would, on a
store that a teammate (or a pulled remote) has tampered with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import blake3
import pytest
from conftest import run_script, write_script

from memostore import Store

from .fskit import cli, forge_result, only_ref, result_node, tree_state

SCRIPT = """
import sys
import memostore


@memostore.memo
def fetch(tag):
    print("BODY RAN", flush=True)
    return memostore.snapshot("data")


snap = fetch("v1")
print("PATH", snap.path)
for path in snap.files():
    print("FILE", path.relative_to(snap.path).as_posix() if snap.is_dir else path.name,
          path.read_text())
"""


class Victim:
    """A project with a data directory, its store, and files outside both."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.project = root / "project"
        (self.project / "data" / "sub").mkdir(parents=True)
        (self.project / "data" / "a.txt").write_text("alpha")
        (self.project / "data" / "sub" / "b.txt").write_text("beta")
        self.script = write_script(self.project, "job.py", SCRIPT)
        self.store_dir = root / "store"
        self.home = root / "home"
        self.home.mkdir()
        bashrc = self.home / ".bashrc"
        bashrc.write_text("export SAFE=1\n")
        bashrc.chmod(0o444)

    def run(self) -> tuple[str, str]:
        proc = run_script(self.script, env={"MEMOSTORE_DIR": str(self.store_dir)})
        return proc.stdout, proc.stderr

    def store(self) -> Store:
        return Store(self.store_dir)

    def stored_entries(self) -> list[list]:
        store = self.store()
        return result_node(store, only_ref(store)[1])["entries"]

    def checkout_path(self, stdout: str) -> Path:
        return Path(next(line[5:] for line in stdout.splitlines() if line.startswith("PATH ")))


@pytest.fixture
def victim(tmp_path: Path) -> Victim:
    v = Victim(tmp_path)
    out, _ = v.run()  # the miss: stores the snapshot
    assert "BODY RAN" in out
    return v


def _files(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("FILE "):
            name, _, text = line[5:].partition(" ")
            out[name] = text
    return out


def _hostile_entries(victim: Victim) -> dict[str, tuple[str, bool, list]]:
    """name -> (snapshot name, is_dir, entries): layouts that aim outside the checkout."""
    (_, blob, size, _), *_ = victim.stored_entries()
    bashrc = victim.home / ".bashrc"
    marker = victim.home / "marker.txt"
    # From checkouts/<staging>/data/, four levels up is the directory holding the store.
    up = "../../../../home"
    return {
        "dotdot overwrites .bashrc": ("data", True, [[f"{up}/.bashrc", blob, size, False]]),
        "dotdot creates a file": ("data", True, [[f"{up}/marker.txt", blob, size, False]]),
        "dotdot inside a path": (
            "data",
            True,
            [["sub/../../" + f"{up}/marker.txt", blob, size, False]],
        ),
        "absolute entry": ("data", True, [[str(marker), blob, size, False]]),
        "absolute name": (str(bashrc), False, [[str(bashrc), blob, size, False]]),
        "dotdot name": (f"{up}/.bashrc", False, [[f"{up}/.bashrc", blob, size, False]]),
        "name is ..": ("..", True, [["home/marker.txt", blob, size, False]]),
    }


CASES = [
    "dotdot overwrites .bashrc",
    "dotdot creates a file",
    "dotdot inside a path",
    "absolute entry",
    "absolute name",
    "dotdot name",
    "name is ..",
]


@pytest.mark.parametrize("case", CASES)
def test_a_crafted_layout_writes_nothing_outside_and_misses(victim: Victim, case: str) -> None:
    name, is_dir, entries = _hostile_entries(victim)[case]
    blobs = {e[1] for e in entries}
    store = victim.store()
    forge_result(store, {"$": "snapshot", "name": name, "dir": is_dir, "entries": entries}, blobs)
    home_before = tree_state(victim.home)
    project_before = tree_state(victim.project)

    out, err = victim.run()

    assert tree_state(victim.home) == home_before  # .bashrc untouched, no marker.txt
    assert not (victim.home / "marker.txt").exists()
    assert tree_state(victim.project) == project_before
    # The crafted value is refused, naming what it held, and the call recomputes.
    assert "the stored result cannot be restored" in err and "recomputing" in err
    assert "refused" in err
    assert "BODY RAN" in out
    assert _files(out) == {"a.txt": "alpha", "sub/b.txt": "beta"}


def test_a_linked_source_file_is_restored_as_a_plain_file(tmp_path: Path) -> None:
    v = Victim(tmp_path)
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("outside")
    (v.project / "data" / "link.txt").symlink_to(secret)
    v.run()
    out, _ = v.run()  # the hit
    checkout = v.checkout_path(out)
    assert "BODY RAN" not in out
    restored = checkout / "link.txt"
    assert not restored.is_symlink() and restored.read_text() == "outside"
    assert not any(p.is_symlink() for p in checkout.rglob("*"))


@pytest.mark.parametrize("planted", ["the tree", "one file"])
def test_a_link_planted_in_a_checkout_is_never_served_or_followed(
    victim: Victim, planted: str
) -> None:
    out, _ = victim.run()  # the hit lays the checkout out
    checkout = victim.checkout_path(out)
    # Another user of the store swaps part of the checkout for links to their files.
    target = victim.home
    if planted == "the tree":
        os.rename(checkout, checkout.with_name("moved"))
        checkout.symlink_to(target, target_is_directory=True)
    else:
        (checkout / "a.txt").unlink()
        (checkout / "a.txt").symlink_to(target / ".bashrc")
    home_before = tree_state(victim.home)

    out, _ = victim.run()

    assert "BODY RAN" not in out  # still a hit, from a checkout laid out again
    assert _files(out) == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert not checkout.is_symlink() and not (checkout / "a.txt").is_symlink()
    assert tree_state(victim.home) == home_before


def test_an_edited_checkout_is_laid_out_again_on_the_next_hit(victim: Victim) -> None:
    out, _ = victim.run()
    checkout = victim.checkout_path(out)
    edited = checkout / "sub" / "b.txt"
    edited.chmod(0o644)  # what a user (or root, who ignores the mode) can do
    with open(edited, "a") as f:
        f.write(" EDITED")
    (checkout / "extra.txt").write_text("added")

    out, _ = victim.run()

    assert "BODY RAN" not in out
    assert _files(out) == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert edited.read_text() == "beta" and not (checkout / "extra.txt").exists()


def test_a_same_size_rewrite_in_the_same_second_is_caught(victim: Victim) -> None:
    out, _ = victim.run()
    checkout = victim.checkout_path(out)
    # Within the timestamp granularity of the layout, with the size kept.
    path = checkout / "a.txt"
    path.chmod(0o644)
    path.write_text("ALPHA")
    out, _ = victim.run()
    assert _files(out)["a.txt"] == "alpha"


def test_appending_to_a_restored_file_never_changes_the_store(victim: Victim) -> None:
    out, _ = victim.run()
    checkout = victim.checkout_path(out)
    restored = checkout / "a.txt"
    (_, blob, _, _) = next(e for e in victim.stored_entries() if e[0] == "a.txt")
    stored = victim.store_dir / "objects" / blob[:2] / blob[2:]
    assert not os.path.samefile(restored, stored)  # a copy, never the object itself
    # Root appends regardless of the read-only mode; others would chmod first.
    restored.chmod(0o644)
    with open(restored, "ab") as f:
        f.write(b" appended")

    assert blake3.blake3(stored.read_bytes()).hexdigest() == blob
    assert cli(victim.store_dir, "fsck").returncode == 0
    out, _ = victim.run()
    assert _files(out)["a.txt"] == "alpha"


def test_a_file_in_place_of_the_manifest_or_tree_is_replaced(victim: Victim) -> None:
    out, _ = victim.run()
    checkout = victim.checkout_path(out)
    manifest = checkout.parent / ".complete"
    manifest.write_text("{}")  # an older version's marker, or damage
    out, _ = victim.run()
    assert _files(out) == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert manifest.read_text() != "{}"


DATASET_SCRIPT = """
import memostore
from datasets import Dataset


@memostore.memo
def build():
    print("BODY RAN", flush=True)
    return Dataset.from_dict({"x": list(range(1000)), "y": [str(i) for i in range(1000)]})


ds = build()
print("ROWS", sum(ds["x"]), ds[999]["y"])
for f in ds.cache_files:
    print("CACHE", f["filename"])
"""


def test_an_edited_dataset_table_is_laid_out_again(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    script = write_script(tmp_path, "ds.py", DATASET_SCRIPT)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    run_script(script, env=env)
    out = run_script(script, env=env).stdout
    assert "BODY RAN" not in out and "ROWS 499500 999" in out
    tables = [Path(line[6:]) for line in out.splitlines() if line.startswith("CACHE ")]
    assert tables and all("checkouts" in str(p) for p in tables)
    original = tables[0].read_bytes()
    store = Store(tmp_path / "store")
    stored = [p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()]
    assert not any(os.path.samefile(tables[0], p) for p in stored)
    tables[0].chmod(0o644)
    with open(tables[0], "r+b") as f:  # flip bytes in the rows, as an edit would
        f.seek(len(original) // 2)
        f.write(b"\xff" * 64)

    out = run_script(script, env=env).stdout

    assert "BODY RAN" not in out and "ROWS 499500 999" in out
    assert tables[0].read_bytes() == original
    assert cli(store.root, "fsck").returncode == 0


def test_concurrent_restores_of_an_edited_checkout_all_serve_the_stored_files(
    victim: Victim,
) -> None:
    out, _ = victim.run()
    checkout = victim.checkout_path(out)
    (checkout / "a.txt").chmod(0o644)
    (checkout / "a.txt").write_text("tampered")
    env = {**os.environ, "MEMOSTORE_DIR": str(victim.store_dir)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(victim.script)],
            cwd=victim.project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for (stdout, stderr), proc in zip(outputs, procs, strict=True):
        assert proc.returncode == 0, stderr
        assert "BODY RAN" not in stdout
        assert _files(stdout) == {"a.txt": "alpha", "sub/b.txt": "beta"}
    # One checkout remains, intact; nothing half-made is left beside it.
    assert (checkout / "a.txt").read_text() == "alpha"
    assert not [p for p in checkout.parent.parent.iterdir() if p.name.startswith(".")]
