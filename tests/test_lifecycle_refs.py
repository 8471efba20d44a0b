"""Deleting many refs at once (eviction): compare-and-delete under each ref's lock."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from memostore.lockfile import LockFile
from memostore.store import Store

OLD, NEW, OTHER = "a" * 64, "b" * 64, "c" * 64


def _leftovers(refs_dir: Path) -> list[str]:
    return [
        name
        for _, _, files in os.walk(refs_dir)
        for name in files
        if name.startswith(".") or ".lock" in name
    ]


def test_only_refs_still_pointing_at_the_old_value_go(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.refs.set("evals/f/one", OLD)
    store.refs.set("evals/f/two", OTHER)  # re-pointed since the plan
    store.refs.set("evals/g/three", OLD)
    pairs = [
        ("evals/f/one", OLD),
        ("evals/f/two", OLD),
        ("evals/g/three", OLD),
        ("evals/f/no", OLD),
    ]
    assert store.refs.delete_many_if_equals(pairs) == 2
    assert dict(store.refs.iter("")) == {"evals/f/two": OTHER}
    assert _leftovers(tmp_path / "store" / "refs") == []  # no lock, no holder record


def test_a_writer_holding_the_lock_re_points_the_ref_and_it_stays(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.refs.set("evals/f/one", OLD)
    path = tmp_path / "store" / "refs" / "evals" / "f" / "one"
    lock = LockFile(path)
    lock.acquire()
    deleted: list[int] = []
    deleter = threading.Thread(
        target=lambda: deleted.append(store.refs.delete_many_if_equals([("evals/f/one", OLD)]))
    )
    deleter.start()
    time.sleep(0.2)  # the deleter found the ref and now waits for the lock
    assert deleter.is_alive()
    lock.commit(NEW.encode() + b"\n")  # the writer re-points it, then releases
    deleter.join(10)
    assert deleted == [0]
    assert store.refs.read("evals/f/one") == NEW
    assert _leftovers(tmp_path / "store" / "refs") == []
