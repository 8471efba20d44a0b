"""One contract for every ref container, plus lock-file behaviour across processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from memostore.errors import RefError
from memostore.odb.lockfile import LockFile
from memostore.odb.objects import digest_bytes
from memostore.odb.refs import (
    BaseRefContainer,
    DiskRefContainer,
    MemoryRefContainer,
    ref_part,
    unescape_ref_part,
)

A, B, C = (digest_bytes(x) for x in (b"a", b"b", b"c"))


@pytest.fixture(params=["disk", "memory"])
def refs(request: pytest.FixtureRequest, tmp_path: Path) -> BaseRefContainer:
    if request.param == "disk":
        return DiskRefContainer(tmp_path)
    return MemoryRefContainer()


class TestRefContract:
    def test_absent_ref_reads_none(self, refs: BaseRefContainer) -> None:
        assert refs.read("evals/f/k") is None

    def test_compare_and_swap(self, refs: BaseRefContainer) -> None:
        assert refs.set_if_equals("evals/f/k", None, A)
        assert not refs.set_if_equals("evals/f/k", None, B)
        assert not refs.set_if_equals("evals/f/k", C, B)
        assert refs.read("evals/f/k") == A
        assert refs.set_if_equals("evals/f/k", A, B)
        assert refs.read("evals/f/k") == B

    def test_set_returns_previous(self, refs: BaseRefContainer) -> None:
        assert refs.set("runs/x", A) is None
        assert refs.set("runs/x", B) == A

    def test_delete_if_equals(self, refs: BaseRefContainer) -> None:
        refs.set("evals/f/k", A)
        assert not refs.delete_if_equals("evals/f/k", B)
        assert refs.delete_if_equals("evals/f/k", A)
        assert refs.read("evals/f/k") is None
        assert not refs.delete_if_equals("evals/f/k", None)

    def test_iter_by_prefix(self, refs: BaseRefContainer) -> None:
        refs.set("evals/f/1", A)
        refs.set("evals/g/2", B)
        refs.set("runs/s/3", C)
        assert dict(refs.iter("evals/")) == {"evals/f/1": A, "evals/g/2": B}
        assert refs.names("evals/f/") == ["evals/f/1"]
        assert len(list(refs.iter())) == 3

    @pytest.mark.parametrize("name", ["", "/abs", "a/../b", "a//b", "a/b.lock", "a/./b", "a b"])
    def test_invalid_names_refused(self, refs: BaseRefContainer, name: str) -> None:
        with pytest.raises(RefError):
            refs.set(name, A)

    def test_values_must_be_ids(self, refs: BaseRefContainer) -> None:
        with pytest.raises(RefError):
            refs.set("evals/f/k", "not-an-id")


def test_ref_part_escapes_reversibly() -> None:
    for text in ["mod.sub:Cls.method", "f.<locals>.g", "a/b", "..", "x.lock", "ünï"]:
        part = ref_part(text)
        assert "/" not in part and part not in {".", ".."} and not part.endswith(".lock")
        assert unescape_ref_part(part) == text


def test_damaged_ref_is_reported(tmp_path: Path) -> None:
    refs = DiskRefContainer(tmp_path)
    refs.set("evals/f/k", A)
    refs.path_of("evals/f/k").write_text("garbage\n")
    with pytest.raises(RefError, match="fsck"):
        refs.read("evals/f/k")
    assert [name for name, _ in refs.iter_damaged()] == ["evals/f/k"]
    refs.set("evals/f/k", B)  # a damaged ref can always be overwritten
    assert refs.read("evals/f/k") == B


def _bump(root: str, rounds: int) -> None:
    refs = DiskRefContainer(Path(root))
    for _ in range(rounds):
        while True:
            current = refs.read("counter")
            value = 0 if current is None else int(current, 16)
            new = f"{value + 1:064x}"
            if refs.set_if_equals("counter", current, new):
                break


def test_compare_and_swap_across_processes_loses_no_update(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_bump, args=(str(tmp_path), 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert int(DiskRefContainer(tmp_path).read("counter") or "0", 16) == 100
    assert not list(tmp_path.rglob("*.lock"))


def test_stale_lock_of_dead_process_is_broken(tmp_path: Path) -> None:
    target = tmp_path / "refs" / "x"
    target.parent.mkdir(parents=True)
    lock_path = target.with_name("x.lock")
    # A holder that died: its pid is gone (pid of a reaped child).
    proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()
    lock_path.write_text(json.dumps({"pid": proc.pid, "host": os.uname().nodename, "time": 0}))
    refs = DiskRefContainer(tmp_path)
    started = time.monotonic()
    refs.set("x", A)
    assert time.monotonic() - started < 5
    assert refs.read("x") == A
    assert not lock_path.exists()


def test_live_lock_times_out_naming_holder(tmp_path: Path) -> None:
    lock = LockFile(tmp_path / "r")
    lock.acquire()
    try:
        other = LockFile(tmp_path / "r", timeout=0.2)
        with pytest.raises(TimeoutError, match=f"pid {os.getpid()}"):
            other.acquire()
    finally:
        lock.release()
