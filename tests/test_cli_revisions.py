"""Revision syntax and the evaluation index, on stores written directly (no subprocesses)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from memostore.errors import RevisionNotFound
from memostore.inspect.inspection import log_records
from memostore.odb import index
from memostore.odb.objects import Links
from memostore.odb.refs import ref_part
from memostore.odb.revisions import AmbiguousRevision, function_matches, resolve_revision
from memostore.odb.store import Store
from memostore.records.evaluation import eval_ref_name, evaluation_doc


def record(store: Store, function: str, started: float, **extra: object) -> str:
    """Write one evaluation and its ref the way a memoised call does; return its id."""
    key = os.urandom(32).hex()
    fields = {
        "function": function,
        "key": key,
        "code": None,
        "code_digest": None,
        "version": None,
        "args": None,
        "hparams": {},
        "args_summary": {},
        "result": None,
        "result_summary": None,
        "status": "ok",
        "error": None,
        "started": started,
        "duration_s": 0.5,
        "provenance": {},
        "parents": [],
        "payloads": {},
        "logs": None,
        **extra,
    }
    doc = evaluation_doc(fields, Links())
    store.objects.add_doc(doc)
    if function.startswith("run:"):
        store.refs.set(f"runs/{ref_part(function[4:])}/{doc.id}", doc.id)
    else:
        store.refs.set(eval_ref_name(function, key), doc.id)
    return doc.id


@pytest.fixture(params=["disk", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(tmp_path / "store") if request.param == "disk" else Store.in_memory()


def test_full_ids_and_prefixes(store: Store) -> None:
    first = record(store, "pkg.mod:train", 100.0)
    assert resolve_revision(store, first) == first
    assert resolve_revision(store, first[:4]) == first
    assert resolve_revision(store, first[:10].upper()) == first
    with pytest.raises(RevisionNotFound):
        resolve_revision(store, first[:3])  # too short for a prefix, and no such function
    with pytest.raises(RevisionNotFound, match="memostore log"):
        resolve_revision(store, "f" * 64 if not first.startswith("f") else "0" * 64)


def test_an_ambiguous_prefix_lists_the_candidates(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    seen: dict[str, str] = {}
    for i in itertools.count():
        evaluation_id = record(store, f"m:f{i % 3}", float(i))
        if evaluation_id[:4] in seen:
            other = seen[evaluation_id[:4]]
            break
        seen[evaluation_id[:4]] = evaluation_id
    with pytest.raises(AmbiguousRevision) as caught:
        resolve_revision(store, evaluation_id[:4])
    message = str(caught.value)
    assert evaluation_id[:12] in message and other[:12] in message
    assert len(caught.value.candidates) == 2
    longer = next(n for n in range(5, 64) if evaluation_id[:n] != other[:n])
    assert resolve_revision(store, evaluation_id[:longer]) == evaluation_id


def test_function_names_resolve_to_the_newest_and_tilde_steps_back(store: Store) -> None:
    old = record(store, "pkg.mod:Trainer.fit", 100.0)
    mid = record(store, "pkg.mod:Trainer.fit", 200.0)
    new = record(store, "pkg.mod:Trainer.fit", 300.0)
    other = record(store, "pkg.other:prepare", 400.0)
    for name in ("pkg.mod:Trainer.fit", "pkg.mod.Trainer.fit", "Trainer.fit", "fit"):
        assert resolve_revision(store, name) == new
    assert resolve_revision(store, "fit~1") == mid
    assert resolve_revision(store, "fit~") == mid
    assert resolve_revision(store, "fit~2") == old
    assert resolve_revision(store, f"{new[:8]}~2") == old
    assert resolve_revision(store, "prepare") == other
    with pytest.raises(RevisionNotFound, match="only 3"):
        resolve_revision(store, "fit~3")
    with pytest.raises(RevisionNotFound):
        resolve_revision(store, "fit~x")


def test_ambiguous_function_names(store: Store) -> None:
    record(store, "a:fit", 1.0)
    record(store, "b:fit", 2.0)
    with pytest.raises(AmbiguousRevision, match="a:fit"):
        resolve_revision(store, "fit")
    assert resolve_revision(store, "b:fit") == resolve_revision(store, "b.fit")


def test_runs_resolve_by_script_name(store: Store) -> None:
    run = record(store, "run:train.py", 5.0)
    assert resolve_revision(store, "train.py") == run
    assert resolve_revision(store, "run:train.py") == run


def test_function_matches_prefers_exact_names() -> None:
    names = ["m:fit", "m:Model.fit", "n:fit"]
    assert function_matches(names, "m:fit") == ["m:fit"]
    assert function_matches(names, "fit") == ["m:fit", "n:fit"]
    assert function_matches(names, "Model.fit") == ["m:Model.fit"]
    assert function_matches(names, "nothing") == []


def test_index_is_a_self_healing_cache(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    ids = [record(store, "m:f", float(i), hparams={"i": i}) for i in range(5)]
    assert index.load(store) == {}
    records, problems = log_records(store)
    assert problems == {}
    assert [r["id"] for r in records] == ids[::-1]
    assert set(index.load(store)) == set(ids)  # listing indexed what it read

    path = index.index_path(store)
    assert path is not None
    with open(path, "ab") as f:
        f.write(b'{"v": 1, "id": "torn')  # a writer that crashed mid-line
    index.record(store, ids[0], store.evaluation(ids[0]).body)
    assert set(index.load(store)) == set(ids)

    path.write_bytes(b"garbage\n")
    records, _ = log_records(store)
    assert [r["args"]["i"] for r in records] == [4, 3, 2, 1, 0]


def test_index_record_never_raises(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    (tmp_path / "store" / "index").write_text("a file where the directory should be")
    index.record(store, "0" * 64, {"function": "m:f"})  # swallowed: the index is a cache
    index.record(Store.in_memory(), "0" * 64, {"function": "m:f"})


def test_unreadable_evaluations_are_reported_not_fatal(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    good = record(store, "m:f", 1.0)
    bad = record(store, "m:f", 2.0)
    os.unlink(store.objects.path_of(bad))
    records, problems = log_records(store)
    assert [r["id"] for r in records] == [good]
    assert set(problems) == {bad}


def test_log_records_are_newest_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    now = time.time()
    ids = [record(store, "m:f", now - i) for i in range(4)]
    records, _ = log_records(store, "f")
    assert [r["id"] for r in records] == ids
    assert records[0]["created"] > records[-1]["created"]
