"""Listing refs on disk: every readable ref once, nothing else, whatever lies under ``refs/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memostore.odb.objects import digest_bytes
from memostore.odb.refs import DiskRefContainer

A, B, C, D = (digest_bytes(x) for x in (b"a", b"b", b"c", b"d"))


def _plant(refs: DiskRefContainer, name: str, content: str) -> Path:
    path = refs.refs_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


@pytest.fixture
def refs(tmp_path: Path) -> DiskRefContainer:
    """Refs written by the container, and files no ref writer makes beside them."""
    refs = DiskRefContainer(tmp_path)
    refs.set("top", A)
    refs.set("evals/f/k1", A)
    refs.set("evals/f/sub/deep/k2", B)
    refs.set("evals/fo/k3", C)
    refs.set("evals/g%2Eh/k4", D)
    refs.set("runs/r1", B)
    _plant(refs, "evals/f/damaged", "garbage\n")
    _plant(refs, "evals/f/long", A + "\n" + "x" * 5000)  # past what a ref read takes
    _plant(refs, "evals/f/k1.lock", A + "\n")  # a writer's lock file
    _plant(refs, "evals/f/.tmp123", A + "\n")  # a remote writer's temporary
    _plant(refs, "evals/bad name/k5", A + "\n")  # a name no writer makes
    _plant(refs, "evals/.hidden/k6", A + "\n")
    os.symlink(refs.refs_dir / "runs" / "r1", refs.refs_dir / "evals" / "f" / "link")
    os.symlink(refs.refs_dir / "runs", refs.refs_dir / "evals" / "linked-dir")
    os.mkfifo(refs.refs_dir / "evals" / "f" / "fifo")
    (refs.refs_dir / "evals" / "empty").mkdir()
    return refs


def test_lists_every_readable_ref_and_nothing_else(refs: DiskRefContainer) -> None:
    assert dict(refs.iter()) == {
        "top": A,
        "evals/f/k1": A,
        "evals/f/sub/deep/k2": B,
        "evals/fo/k3": C,
        "evals/g%2Eh/k4": D,
        "runs/r1": B,
    }


@pytest.mark.parametrize(
    ("prefix", "names"),
    [
        ("evals/", ["evals/f/k1", "evals/f/sub/deep/k2", "evals/fo/k3", "evals/g%2Eh/k4"]),
        ("evals/f", ["evals/f/k1", "evals/f/sub/deep/k2", "evals/fo/k3"]),
        ("evals/f/", ["evals/f/k1", "evals/f/sub/deep/k2"]),
        ("evals/f/sub/", ["evals/f/sub/deep/k2"]),
        ("evals/f/k1", ["evals/f/k1"]),
        ("t", ["top"]),
        ("evals/linked-dir/", []),  # never listed through a link
        ("evals/bad name/", []),
        ("evals//", []),
        ("evals/../runs/", []),
        ("nothing/", []),
    ],
)
def test_prefix_selects_names(refs: DiskRefContainer, prefix: str, names: list[str]) -> None:
    assert refs.names(prefix) == names


def test_a_directory_lists_its_refs_before_its_subdirectories(refs: DiskRefContainer) -> None:
    listed = [name for name, _ in refs.iter("evals/f/")]
    assert listed.index("evals/f/k1") < listed.index("evals/f/sub/deep/k2")


def test_listing_agrees_with_reading_each_ref(refs: DiskRefContainer) -> None:
    for name, target in refs.iter():
        assert refs.read(name) == target
