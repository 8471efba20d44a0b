"""du, rm and tag: byte accounting against the disk, removal freeing what it says, tags pinning."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.main import cli
from test_cli import run_cli

from memostore.lifecycle.usage import compute_usage
from memostore.odb.store import Store

LIB = """\
import numpy as np
from memostore import memo


@memo
def pair(k):
    # Both results hold an equal array: one object, stored once, reached by both.
    return {"shared": np.arange(20_000, dtype=np.float64), "own": np.full(5_000, float(k))}


@memo
def solo(n):
    return np.arange(n, dtype=np.int64)
"""

RUN = """\
from lib import pair, solo

pair(1)
pair(2)
solo(3_000)
"""


def invoke(store: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(store), *args])


def du_json(store: Path, *args: str) -> dict[str, Any]:
    result = invoke(store, "du", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def disk_bytes(store: Path) -> int:
    """Every byte of the files under objects/ and packs/, by os.lstat."""
    total = 0
    for sub in ("objects", "packs"):
        for dirpath, _dirs, files in os.walk(store / sub):
            total += sum(os.lstat(os.path.join(dirpath, f)).st_size for f in files)
    return total


def fsck_ok(store: Path) -> None:
    result = invoke(store, "fsck")
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pair(1), pair(2) (sharing an array) and solo(3000), run once per module."""
    root = tmp_path_factory.mktemp("du")
    write_script(root, "lib.py", LIB)
    script = write_script(root, "run.py", RUN)
    run_script(script, env={"MEMOSTORE_DIR": str(root / "store")})
    return root / "store"


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    """A copy of the built store for one test to change."""
    copy = tmp_path / "store"
    shutil.copytree(built, copy, symlinks=True)
    return copy


def evaluations_of(data: dict[str, Any], function: str) -> list[dict[str, Any]]:
    found = [e for e in data["evaluations"] if e["function"] == function]
    return sorted(found, key=lambda e: e["started"])


def test_du_total_is_the_bytes_on_disk(store: Path) -> None:
    data = du_json(store)
    on_disk = disk_bytes(store)
    assert abs(data["total_bytes"] - on_disk) <= on_disk * 0.01
    assert data["total_bytes"] == on_disk  # sizes add up exactly, pack overhead included
    assert data["garbage_bytes"] == 0 and data["reachable_bytes"] == on_disk
    assert {f["function"] for f in data["functions"]} == {"lib:pair", "lib:solo"}
    # A second run reads the links cache instead of the documents: same answer.
    assert (store / "index" / "links").stat().st_size > 0
    assert du_json(store) == data

    proc = run_cli(store, "du")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("store: ") and "on disk" in lines[0]
    assert any(line.startswith("lib:pair") for line in lines)
    assert "largest evaluations" in proc.stdout


def test_exclusive_and_shared_bytes_of_two_evaluations_sharing_an_array(store: Path) -> None:
    first, second = evaluations_of(du_json(store, "pair"), "lib:pair")
    array = 20_000 * 8
    for ev in (first, second):
        assert ev["bytes"] == ev["exclusive_bytes"] + ev["shared_bytes"]
        # The 160 kB array (and the function's code) are reached by both...
        assert ev["shared_bytes"] >= array
        # ...while each one's own 40 kB array is its alone.
        assert 5_000 * 8 <= ev["exclusive_bytes"] < array
    assert first["shared_bytes"] == second["shared_bytes"]
    [function] = du_json(store, "pair")["functions"]
    assert function["evaluations"] == 2
    # Nothing but pair's evaluations reaches those objects: all exclusive to the function.
    assert function["exclusive_bytes"] == function["bytes"]
    assert function["bytes"] == first["bytes"] + second["exclusive_bytes"]

    one = du_json(store, first["id"][:10])
    assert [e["id"] for e in one["evaluations"]] == [first["id"]]
    text = invoke(store, "du", first["id"][:10]).output
    assert "exclusive" in text and "shared" in text and first["id"] in text


def test_rm_then_gc_frees_exactly_the_exclusive_bytes(store: Path) -> None:
    _, second = evaluations_of(du_json(store), "lib:pair")
    before = disk_bytes(store)
    result = invoke(store, "rm", second["id"][:12])
    assert result.exit_code == 0, result.output
    assert "removed 1 evaluation(s)" in result.output
    assert f"frees {_human(second['exclusive_bytes'])}" in result.output
    gc = invoke(store, "gc", "--grace", "0")
    assert gc.exit_code == 0, gc.output
    assert before - disk_bytes(store) == second["exclusive_bytes"]
    after = du_json(store)
    assert second["id"] not in {e["id"] for e in after["evaluations"]}
    assert after["total_bytes"] == disk_bytes(store)
    # The array both held stays, now the other's alone.
    [first] = evaluations_of(after, "lib:pair")
    assert first["shared_bytes"] == 0
    fsck_ok(store)


def test_rm_of_the_evaluation_whose_pack_is_shared_frees_its_bytes(store: Path) -> None:
    first, _ = evaluations_of(du_json(store), "lib:pair")
    before = disk_bytes(store)
    assert invoke(store, "rm", first["id"]).exit_code == 0
    assert invoke(store, "gc", "--grace", "0").exit_code == 0
    freed = before - disk_bytes(store)
    # gc rewrites the pack that keeps the shared array: only alignment padding may move.
    assert abs(freed - first["exclusive_bytes"]) <= 64
    assert du_json(store)["total_bytes"] == disk_bytes(store)
    fsck_ok(store)


def test_rm_dry_run_changes_nothing(store: Path) -> None:
    def state() -> list[tuple[str, int]]:
        return sorted(
            (str(p.relative_to(store)), p.stat().st_size)
            for sub in ("refs", "objects", "packs")
            for p in (store / sub).rglob("*")
            if p.is_file()
        )

    before = state()
    data = du_json(store)
    pair = evaluations_of(data, "lib:pair")
    result = invoke(store, "rm", "--dry-run", "--json", "pair")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["dry_run"] is True
    assert sorted(report["evaluations"]) == sorted(e["id"] for e in pair)
    assert len(report["refs"]) == 2
    [function] = [f for f in data["functions"] if f["function"] == "lib:pair"]
    assert report["freed_bytes"] == function["exclusive_bytes"]
    text = invoke(store, "rm", "--dry-run", "pair").output
    assert text.startswith("rm: would remove 2 evaluation(s)")
    assert state() == before
    assert du_json(store) == data


def test_rm_function_removes_all_its_evaluations_and_gc_frees_them(store: Path) -> None:
    data = du_json(store)
    [function] = [f for f in data["functions"] if f["function"] == "lib:pair"]
    before = disk_bytes(store)
    assert invoke(store, "rm", "pair").exit_code == 0
    assert invoke(store, "gc", "--grace", "0").exit_code == 0
    assert before - disk_bytes(store) == function["exclusive_bytes"]
    assert [f["function"] for f in du_json(store)["functions"]] == ["lib:solo"]
    assert invoke(store, "log", "pair").exit_code == 1  # no evaluations left
    fsck_ok(store)


def test_a_tagged_evaluation_survives_rm_and_gc(store: Path) -> None:
    [solo] = evaluations_of(du_json(store), "lib:solo")
    result = invoke(store, "tag", "baseline", "solo")
    assert result.exit_code == 0, result.output
    assert f"baseline -> {solo['id'][:12]}" in result.output

    refused = run_cli(store, "rm", "solo")
    assert refused.returncode == 1
    assert "memostore tag -d baseline" in refused.stderr and "Traceback" not in refused.stderr
    refused = invoke(store, "rm", solo["id"])
    assert refused.exit_code == 1 and "nothing was removed" in refused.output

    assert invoke(store, "rm", "pair").exit_code == 0
    assert invoke(store, "gc", "--grace", "0").exit_code == 0
    data = du_json(store)
    [kept] = data["evaluations"]
    assert kept["id"] == solo["id"] and kept["tags"] == ["baseline"]
    assert any(r.startswith("evals/") for r in kept["refs"])  # its own ref stayed too
    assert data["total_bytes"] == disk_bytes(store)
    # The tag is a revision: show and du take it.
    shown = json.loads(invoke(store, "show", "--json", "baseline").output)
    assert shown["id"] == solo["id"] and shown["tags"] == ["baseline"]
    assert "baseline" in invoke(store, "show", "baseline").output
    assert du_json(store, "baseline")["evaluations"][0]["id"] == solo["id"]
    fsck_ok(store)

    # Untagged, it goes like any other.
    assert invoke(store, "tag", "-d", "baseline").exit_code == 0
    assert invoke(store, "rm", "solo").exit_code == 0
    assert invoke(store, "gc", "--grace", "0").exit_code == 0
    assert disk_bytes(store) == 0
    fsck_ok(store)


def test_tag_list_move_and_delete(store: Path) -> None:
    first, second = evaluations_of(du_json(store), "lib:pair")
    assert "no tags" in invoke(store, "tag").output
    assert invoke(store, "tag", "v1", first["id"][:8]).exit_code == 0
    assert invoke(store, "tag", "best.run-2", second["id"][:8]).exit_code == 0
    listed = json.loads(invoke(store, "tag", "--json").output)
    assert [(t["tag"], t["id"]) for t in listed] == [
        ("best.run-2", second["id"]),
        ("v1", first["id"]),
    ]
    text = run_cli(store, "tag").stdout
    assert "v1" in text and first["id"][:12] in text and "lib:pair" in text

    moved = invoke(store, "tag", "v1", second["id"][:8])
    assert moved.exit_code == 1 and "--force" in moved.output
    assert invoke(store, "tag", "v1", first["id"][:8]).exit_code == 0  # same target: fine
    moved = invoke(store, "tag", "--force", "v1", second["id"][:8])
    assert moved.exit_code == 0 and "moved v1" in moved.output
    assert json.loads(invoke(store, "show", "--json", "v1").output)["id"] == second["id"]

    assert invoke(store, "tag", "-d", "v1").exit_code == 0
    again = invoke(store, "tag", "-d", "v1")
    assert again.exit_code == 1 and "no tag 'v1'" in again.output
    assert [t["tag"] for t in json.loads(invoke(store, "tag", "--json").output)] == ["best.run-2"]
    unknown = invoke(store, "tag", "v2", "no_such_function")
    assert unknown.exit_code == 1 and "unknown revision" in unknown.output
    assert invoke(store, "tag", "v2").exit_code == 2  # a name without a revision
    fsck_ok(store)


@pytest.mark.parametrize(
    "name", ["bad name", "-x", ".hidden", "a/b", "beef", "x.lock", "a" * 101, "ü", "a~1"]
)
def test_bad_tag_names_are_refused_naming_the_rule(store: Path, name: str) -> None:
    result = invoke(store, "tag", "--", name, "solo")
    assert result.exit_code == 1
    assert "a tag name is 1 to 100 letters, digits" in result.output
    assert not (store / "refs" / "tags").exists() or not any((store / "refs" / "tags").iterdir())


def test_a_torn_links_cache_line_is_skipped(store: Path) -> None:
    data = du_json(store)
    links = store / "index" / "links"
    content = links.read_bytes()
    # A crash mid-append, then another writer's line right after it.
    links.write_bytes(content + content[: len(content) // 3] + content)
    assert du_json(store) == data
    links.write_bytes(b"not a cache\n" + content[:-7])
    assert du_json(store) == data


def _human(n: int) -> str:
    from memostore.values.summaries import format_bytes

    return format_bytes(n)


@pytest.mark.parametrize("name", ["du", "rm", "tag"])
def test_cli_reference_documents_every_option(name: str) -> None:
    from test_cli_docs import click_options, option_rows, sections

    section = sections()[name]
    assert option_rows(section) == click_options(cli.commands[name])
    synopsis = section.split("```")[1]
    for param in cli.commands[name].params:
        if param.param_type_name != "option":
            assert param.human_readable_name.upper() in synopsis.upper()


def test_links_cache_rewrite_keeps_only_the_entries_asked_for(store: Path) -> None:
    from memostore.lifecycle import links_cache

    data = du_json(store)
    opened = Store(store)
    entries = dict(links_cache.load(opened))
    keep = sorted(entries)[: len(entries) // 2]
    assert links_cache.rewrite(opened, keep) == len(keep)
    assert dict(links_cache.load(opened)) == {i: entries[i] for i in keep}
    assert du_json(store) == data  # the rest is read from the objects again
    assert dict(links_cache.load(opened)) == entries


def test_usage_of_an_in_memory_store() -> None:
    from memostore.odb.objects import KIND_VALUE, Doc, Links
    from memostore.records.evaluation import eval_ref_name, evaluation_doc

    store = Store.in_memory()
    blob = store.objects.add_bytes(b"x" * 1000)
    result = Doc(KIND_VALUE, {"node": 1}, Links(blobs={blob}))
    store.objects.add_doc(result)
    fields = {"function": "m:f", "result": result.id, "status": "ok", "started": 1.0}
    evaluation = evaluation_doc({**fields, "parents": []}, Links())
    store.objects.add_doc(evaluation)
    store.refs.set(eval_ref_name("m:f", "a" * 64), evaluation.id)
    store.objects.add_bytes(b"garbage")
    usage = compute_usage(store)
    assert usage.total_bytes == 1000 + len(result.data) + len(evaluation.data) + len(b"garbage")
    assert usage.exclusive_bytes(evaluation.id) == usage.reachable_bytes == usage.total_bytes - 7
    assert usage.garbage_bytes == 7
    assert usage.evaluations[evaluation.id].function == "m:f"
