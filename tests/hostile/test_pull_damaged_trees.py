"""A pull skips the evaluation whose tree is damaged deep on the remote, and takes the rest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_script, write_script

from memostore import Store
from memostore.remote.walk import object_name

from .fskit import cli

JOB = """
import sys
import memostore
import torch


@memostore.memo
def first(n):
    print("BODY first", n, flush=True)
    torch.manual_seed(n)
    # A module is a document below the result's: a tree two levels deep.
    return {"model": torch.nn.Linear(3, 2), "raw": bytes([n]) * 300_000}


@memostore.memo
def second(n):
    print("BODY second", n, flush=True)
    return {"n": n, "s": "x" * n}


for arg in sys.argv[1:]:
    first(int(arg))
    second(int(arg))
"""


def _closure(store: Store, root: str) -> dict[str, int]:
    """Every object below *root* (itself excluded), with its depth (1: linked by root)."""
    depth: dict[str, int] = {}
    frontier = [(root, 0)]
    while frontier:
        object_id, level = frontier.pop()
        doc = store.objects.get_doc(object_id)
        for child in doc.links.docs:
            if child not in depth:
                depth[child] = level + 1
                frontier.append((child, level + 1))
        for blob in doc.links.blobs:
            depth.setdefault(blob, level + 1)
    return depth


class Shared:
    """Store A computed first() and second() and pushed them; B pulls."""

    def __init__(self, root: Path) -> None:
        self.script = write_script(root, "job.py", JOB)
        self.a, self.b, self.remote = root / "A", root / "B", root / "shared"
        run_script(self.script, "7", env={"MEMOSTORE_DIR": str(self.a)})
        assert cli(self.a, "push", str(self.remote)).returncode == 0
        store = Store(self.a)
        refs = dict(store.refs.iter("evals/"))
        (self.first_ref,) = [n for n in refs if ":first/" in n or "first" in n.split("/")[1]]
        (second_ref,) = [n for n in refs if n != self.first_ref]
        self.first_root = refs[self.first_ref]
        shared = set(_closure(store, refs[second_ref])) | {refs[second_ref]}
        self.exclusive = {
            i: d for i, d in _closure(store, self.first_root).items() if i not in shared
        }
        self.is_doc = {i: _is_doc(store, i) for i in self.exclusive}

    def deepest(self, doc: bool) -> str:
        """The deepest object only first() reaches: a document or a blob."""
        candidates = [i for i, d in self.exclusive.items() if self.is_doc[i] == doc]
        assert candidates, self.exclusive
        return max(candidates, key=lambda i: self.exclusive[i])

    def on_remote(self, object_id: str) -> Path:
        return self.remote / object_name(object_id)

    def pull(self) -> tuple[dict[str, object], str]:
        proc = cli(self.b, "pull", str(self.remote), "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout), proc.stderr

    def run_b(self) -> str:
        return run_script(self.script, "7", env={"MEMOSTORE_DIR": str(self.b)}).stdout


def _is_doc(store: Store, object_id: str) -> bool:
    try:
        store.objects.get_doc(object_id)
    except Exception:
        return False
    return True


@pytest.fixture
def shared(tmp_path: Path) -> Shared:
    return Shared(tmp_path)


def _corrupt(path: Path) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("what", "damage"),
    [
        ("document", "corrupt"),
        ("document", "missing"),
        ("blob", "corrupt"),
        ("blob", "missing"),
    ],
)
def test_a_damaged_object_deep_in_one_tree_skips_only_its_ref(
    shared: Shared, what: str, damage: str
) -> None:
    victim = shared.deepest(doc=what == "document")
    assert shared.exclusive[victim] >= 2, "below the first level"
    path = shared.on_remote(victim)
    if damage == "corrupt":
        _corrupt(path)
    else:
        path.unlink()

    report, stderr = shared.pull()

    (skipped,) = report["skipped"]
    assert skipped == shared.first_ref
    assert victim in report["skipped"][skipped]
    assert ("corrupt" if damage == "corrupt" else "missing") in report["skipped"][skipped]
    (warning,) = [line for line in stderr.splitlines() if "MemostoreWarning" in line]
    assert shared.first_ref in warning
    store = Store(shared.b)
    assert store.refs.read(shared.first_ref) is None
    assert not store.objects.contains(victim)
    # Everything else came over: second() hits in B, first() runs.
    out = shared.run_b()
    assert "BODY second" not in out and "BODY first 7" in out
    assert cli(shared.b, "fsck").returncode == 0
