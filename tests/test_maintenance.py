"""fsck and gc: damage is named, the memoised call repairs it; gc frees exactly the garbage."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script
from memostore_cli.main import cli
from test_cli import run_cli

from memostore.lifecycle.maintenance import fsck, gc
from memostore.odb import index
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.odb.store import Store

LIB = """\
import numpy as np
from memostore import memo


@memo
def prepare(n):
    print("RUN prepare", n)
    return np.arange(n, dtype=np.float64)


@memo
def train(data, lr):
    print("RUN train", lr)
    return {"w": data * lr, "tag": f"lr={lr}"}
"""

RUN = """\
import sys
from lib import prepare, train

data = prepare(1000)
for lr in sys.argv[1:]:
    out = train(data, float(lr))
    print("W", lr, float(out["w"].sum()))
"""


def invoke(store: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(store), *args])


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Any]:
    """prepare(1000), train(data, 0.1) and train(data, 0.2) in a fresh store."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "lib.py").write_text(LIB)
    (proj / "run.py").write_text(RUN)
    store = tmp_path / "store"
    env = {"MEMOSTORE_DIR": str(store)}
    out = run_script(proj / "run.py", "0.1", "0.2", env=env).stdout
    assert out.count("RUN") == 3
    return {"proj": proj, "store": store, "env": env}


def run(project: dict[str, Any], *lrs: str) -> str:
    return run_script(project["proj"] / "run.py", *lrs, env=project["env"]).stdout


def reachable(store: Store, roots: list[str]) -> set[str]:
    """Everything linked from *roots*, computed independently of gc."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        object_id = stack.pop()
        if object_id in seen:
            continue
        seen.add(object_id)
        try:
            doc = store.objects.get_doc(object_id)
        except Exception:
            continue  # a blob
        stack.extend(doc.links.docs)
        seen.update(doc.links.blobs)
    return seen


def train_ref(store: Store, lr: float) -> tuple[str, str]:
    for name, evaluation_id in store.refs.iter("evals/"):
        body = store.evaluation(evaluation_id).body
        if body["function"] == "lib:train" and body["hparams"]["lr"] == lr:
            return name, evaluation_id
    raise AssertionError(f"no train evaluation with lr={lr}")


def result_blob(store: Store, evaluation_id: str) -> str:
    result = store.objects.get_doc(store.evaluation(evaluation_id).body["result"])
    (blob,) = result.links.blobs
    return blob


def flip_byte(path: Path, offset: int = 100) -> None:
    os.chmod(path, 0o644)  # objects are read-only once written
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_fsck_passes_on_a_sound_store(project: dict[str, Any]) -> None:
    result = invoke(project["store"], "fsck")
    assert result.exit_code == 0, result.output
    assert "checked" in result.output


def test_fsck_names_a_flipped_byte_and_the_call_recomputes(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    _, evaluation_id = train_ref(store, 0.2)
    blob = result_blob(store, evaluation_id)
    flip_byte(store.objects.path_of(blob))

    result = invoke(project["store"], "fsck")
    assert result.exit_code == 1
    assert blob in result.output and "corrupt" in result.output
    assert "evals/lib%3Atrain/" in result.output  # the ref reaching it is named too
    proc = run_cli(project["store"], "fsck", "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert not report["ok"]
    assert any(p["name"] == blob and p["kind"] == "object" for p in report["problems"])

    out = run(project, "0.1", "0.2")
    assert "RUN train 0.2" in out and "RUN train 0.1" not in out and "RUN prepare" not in out
    assert "W 0.2 99900.0" in out  # the right value: sum(range(1000)) * 0.2
    assert invoke(project["store"], "fsck").exit_code == 0  # the recompute repaired it
    assert "RUN" not in run(project, "0.2")


def test_fsck_names_a_missing_object_and_its_refs(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    name, evaluation_id = train_ref(store, 0.1)
    args_id = store.evaluation(evaluation_id).body["args"]
    store.objects.path_of(args_id).unlink()
    result = invoke(project["store"], "fsck")
    assert result.exit_code == 1
    assert f"links missing object {args_id}" in result.output
    assert name in result.output


def test_fsck_names_a_damaged_ref(project: dict[str, Any]) -> None:
    ref = project["store"] / "refs" / "evals" / "junk"
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text("not an id\n")
    result = invoke(project["store"], "fsck")
    assert result.exit_code == 1
    assert "evals/junk" in result.output


def test_fsck_rebuilds_a_lost_index(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    invoke(project["store"], "log")
    index.index_path(store).unlink()
    report = fsck(store)
    assert report.ok and report.index.startswith("rebuilt")
    assert len(index.load(store)) == 3
    assert fsck(store).index == "ok"


def test_gc_frees_exactly_the_deleted_evaluations_unique_objects(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    name, doomed = train_ref(store, 0.2)
    assert store.refs.delete_if_equals(name, doomed)
    kept_roots = [target for _, target in store.refs.iter("")]
    keep = reachable(store, kept_roots)
    unique = reachable(store, [doomed]) - keep
    assert doomed in unique and result_blob(store, doomed) in unique
    before = set(store.objects.iter_ids())

    dry = json.loads(invoke(project["store"], "gc", "--grace", "0", "--dry-run", "--json").output)
    assert set(dry["deleted"]) == unique and set(store.objects.iter_ids()) == before

    result = invoke(project["store"], "gc", "--grace", "0")
    assert result.exit_code == 0, result.output
    assert f"freed {len(unique)} object(s)" in result.output
    after = set(store.objects.iter_ids())
    assert after == before - unique
    assert keep <= after

    out = run(project, "0.1")  # every other call still hits
    assert "RUN" not in out and "W 0.1 49950.0" in out
    out = run(project, "0.2")  # the collected one computes again, correctly
    assert "RUN train 0.2" in out and "RUN prepare" not in out and "W 0.2 99900.0" in out
    assert invoke(project["store"], "fsck").exit_code == 0
    assert [
        r["args"]["lr"]
        for r in json.loads(invoke(project["store"], "log", "train", "--json").output)
    ] == [0.2, 0.1]


def test_gc_keeps_young_objects_and_pending_roots(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    name, doomed = train_ref(store, 0.2)
    store.refs.delete_if_equals(name, doomed)
    report = gc(store)  # default grace: an hour
    assert report.deleted == [] and report.kept_young > 0

    orphan = Doc(KIND_VALUE, {"node": "in progress"}, Links())
    store.objects.add_doc(orphan)
    store.mark_pending("run-1", [orphan.id])
    report = gc(store, grace_s=0)
    assert doomed in report.deleted and orphan.id not in report.deleted
    assert store.objects.contains(orphan.id)
    store.clear_pending("run-1")
    assert orphan.id in gc(store, grace_s=0).deleted


def test_gc_removes_stale_temp_files_and_old_quarantine(project: dict[str, Any]) -> None:
    root = project["store"]
    old = time.time() - 10 * 86400
    (root / "tmp").mkdir(exist_ok=True)
    stale, fresh = root / "tmp" / "obj-1-stale", root / "tmp" / "obj-2-fresh"
    stale.write_bytes(b"x" * 10)
    fresh.write_bytes(b"y")
    os.utime(stale, (old, old))
    (root / "quarantine").mkdir(exist_ok=True)
    ancient = root / "quarantine" / ("ab" * 32 + ".1234")
    recent = root / "quarantine" / ("cd" * 32 + ".5678")
    ancient.write_bytes(b"z")
    recent.write_bytes(b"z")
    very_old = time.time() - 30 * 86400
    os.utime(ancient, (very_old, very_old))
    os.utime(recent, (old, old))
    report = json.loads(invoke(root, "gc", "--json").output)
    assert report["tmp_removed"] == 1 and report["tmp_bytes"] == 10
    assert report["quarantine_removed"] == 1
    assert not stale.exists() and fresh.exists()
    assert not ancient.exists() and recent.exists()


def test_gc_stops_on_a_damaged_ref(project: dict[str, Any]) -> None:
    store = Store(project["store"])
    name, doomed = train_ref(store, 0.2)
    store.refs.delete_if_equals(name, doomed)
    (project["store"] / "refs" / "evals" / "broken").write_text("garbage\n")
    before = set(store.objects.iter_ids())
    result = invoke(project["store"], "gc", "--grace", "0")
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "evals/broken" in result.output
    assert set(store.objects.iter_ids()) == before


def test_gc_and_fsck_on_an_in_memory_store() -> None:
    store = Store.in_memory()
    kept = Doc(KIND_VALUE, {"node": [1, 2]}, Links())
    dropped = Doc(KIND_VALUE, {"node": [3]}, Links())
    blob = store.objects.add_bytes(b"payload")
    holder = Doc(
        KIND_VALUE, {"node": {"$": "bytes", "blob": blob}}, Links(docs={kept.id}, blobs={blob})
    )
    for doc in (kept, dropped, holder):
        store.objects.add_doc(doc)
    store.refs.set("evals/x/y", holder.id)
    report = gc(store, grace_s=0)
    assert report.deleted == [dropped.id]
    assert fsck(store).ok
    store.objects.tamper(blob, b"changed")
    problems = fsck(store).problems
    assert [p.name for p in problems if p.kind == "object"] == [blob]
    assert [p.name for p in problems if p.kind == "ref"] == ["evals/x/y"]


def test_gc_keeps_what_metric_journals_in_progress_stored(
    project: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memostore.metrics import recover

    store = Store(project["store"])
    image = store.objects.add_bytes(b"\x89PNG logged, not sealed yet")
    monkeypatch.setattr(recover, "journal_roots", lambda s: {image})
    assert image not in gc(store, grace_s=0).deleted
    monkeypatch.setattr(recover, "journal_roots", lambda s: set())
    assert gc(store, grace_s=0).deleted == [image]


def test_quarantine_period_counts_from_the_move(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    object_id = store.objects.add_bytes(b"old bytes" * 100)
    path = store.objects.path_of(object_id)
    month_ago = time.time() - 30 * 86400
    os.utime(path, (month_ago, month_ago))  # written long ago, found damaged today
    store.objects.quarantine(object_id)
    report = gc(store)
    assert report.quarantine_removed == 0
    assert len(list((store.root / "quarantine").iterdir())) == 1
