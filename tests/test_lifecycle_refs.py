"""Deleting many refs at once (eviction): compare-and-delete without a lock per ref."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from memostore.odb.lockfile import LockFile
from memostore.odb.store import Store

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


def test_a_writer_holding_the_lock_is_not_waited_for_and_its_value_stays(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.refs.set("evals/f/one", OLD)
    path = tmp_path / "store" / "refs" / "evals" / "f" / "one"
    lock = LockFile(path)
    lock.acquire()  # a writer about to re-point the ref
    assert store.refs.delete_many_if_equals([("evals/f/one", OLD)]) == 1  # takes no lock
    lock.commit(NEW.encode() + b"\n")
    assert store.refs.read("evals/f/one") == NEW
    assert _leftovers(tmp_path / "store" / "refs") == []


def test_racing_writers_never_lose_their_value(tmp_path: Path) -> None:
    """Round after round, a writer re-points a ref while eviction deletes its old value:
    the writer's value is there at the end of every round, and a reader meanwhile
    never sees a value that is neither the old one nor the writer's."""
    store = Store(tmp_path / "store")
    name = "evals/f/raced"
    seen: set[str | None] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(store.refs.read(name))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(200):
            store.refs.set(name, OLD)
            new = f"{round_:064x}"
            start = threading.Barrier(2)

            def write(value: str = new, start: threading.Barrier = start) -> None:
                start.wait()
                store.refs.set(name, value)

            writer = threading.Thread(target=write)
            writer.start()
            start.wait()
            store.refs.delete_many_if_equals([(name, OLD)])
            writer.join()
            assert store.refs.read(name) == new, f"round {round_}: the writer's value was lost"
    finally:
        stop.set()
        reader.join()
    assert seen <= {OLD, None} | {f"{i:064x}" for i in range(200)}
    assert _leftovers(tmp_path / "store" / "refs") == []


def test_links_and_damaged_refs_are_left_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.refs.set("evals/f/real", OLD)
    refs_dir = tmp_path / "store" / "refs" / "evals" / "f"
    (refs_dir / "damaged").write_text("not an id\n")
    outside = tmp_path / "outside"
    outside.write_text(OLD + "\n")
    (refs_dir / "linked").symlink_to(outside)
    pairs = [("evals/f/damaged", OLD), ("evals/f/linked", OLD), ("evals/f/linked", None)]
    assert store.refs.delete_many_if_equals(pairs) == 0
    assert (refs_dir / "damaged").read_text() == "not an id\n"
    assert (refs_dir / "linked").is_symlink() and outside.read_text() == OLD + "\n"
    # With no expected value, whatever the ref holds goes (a damaged one too).
    anything = [("evals/f/damaged", None), ("evals/f/real", None)]
    assert store.refs.delete_many_if_equals(anything) == 2
    assert not (refs_dir / "damaged").exists() and store.refs.read("evals/f/real") is None
