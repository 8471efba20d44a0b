"""The ``memostore`` CLI end to end: log, show, diff on a store written by real runs.

Each check runs through click's runner and, for the acceptance cases, as a real
subprocess of the ``memostore`` console script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script
from memostore_cli.main import cli

LOG_FIELDS = {"id", "function", "status", "created", "duration_s", "args", "parents"}
SHOW_FIELDS = LOG_FIELDS | {"code", "result", "metrics", "provenance"}

LIB = """\
import torch
from memostore import memo

try:
    from memostore import log as log_metrics
except ImportError:
    from memostore.metrics.writer import log as log_metrics


def helper(x):
    return x * 2


@memo
def prepare(n):
    print("RUN prepare")
    torch.manual_seed(0)
    return torch.randn(n, 3)


@memo
def train(data, lr):
    print("RUN train")
    w = helper(data) * lr
    for step in range(5):
        log_metrics({"loss": float(w.abs().sum()) / (step + 1)}, step=step)
    return {"w": w, "lr": lr}
"""

RUN = """\
import sys
from lib import prepare, train

data = prepare(4)
out = train(data, float(sys.argv[1]))
print("W", round(float(out["w"].sum()), 6))
"""


def memostore_exe() -> str:
    exe = Path(sys.executable).with_name("memostore")
    return str(exe) if exe.exists() else "memostore"


def run_cli(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The console script in a subprocess, output piped."""
    env = {k: v for k, v in os.environ.items() if k != "MEMOSTORE_DIR"}
    return subprocess.run(
        [memostore_exe(), "--store", str(store), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd) if cwd else None,
        timeout=60,
    )


def invoke(store: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--store", str(store), *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three evaluations of two functions; the helper edited before the third."""
    root = tmp_path_factory.mktemp("cli")
    proj = root / "proj"
    proj.mkdir()
    store = root / "store"
    (proj / "lib.py").write_text(LIB)
    (proj / "run.py").write_text(RUN)
    env = {"MEMOSTORE_DIR": str(store)}
    run_script(proj / "run.py", "0.1", env=env)
    (proj / "lib.py").write_text(LIB.replace("return x * 2", "return x * 3"))
    run_script(proj / "run.py", "0.2", env=env)
    records = json.loads(invoke(store, "log", "--json").output)
    return {"root": root, "proj": proj, "store": store, "records": records}


def test_log_json_lists_newest_first_with_the_design_fields(project: dict[str, Any]) -> None:
    records = project["records"]
    assert [r["function"] for r in records] == ["lib:train", "lib:train", "lib:prepare"]
    for record in records:
        assert set(record) >= LOG_FIELDS
        assert record["status"] == "ok"
        assert len(record["id"]) == 64
    created = [r["created"] for r in records]
    assert created == sorted(created, reverse=True)
    newest, older, prepare = records
    assert newest["args"]["lr"] == 0.2 and older["args"]["lr"] == 0.1
    assert prepare["id"] in newest["parents"] and prepare["id"] in older["parents"]

    proc = run_cli(project["store"], "log", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in json.loads(proc.stdout)] == [r["id"] for r in records]


def test_log_text_variants(project: dict[str, Any]) -> None:
    store, records = project["store"], project["records"]
    text = invoke(store, "log").output.splitlines()
    assert len(text) == 3 and text[0].startswith(records[0]["id"][:10])
    assert "lr=0.2" in text[0] and "ok" in text[0]

    only = invoke(store, "log", "prepare").output.splitlines()
    assert len(only) == 1 and "lib:prepare" in only[0]
    assert len(invoke(store, "log", "-n", "2").output.splitlines()) == 2

    graph = invoke(store, "log", "--graph").output
    assert graph.splitlines()[0].startswith("* ")
    assert "/" in graph  # both train evaluations descend from the one prepare

    table = invoke(store, "log", "train", "--metrics", "loss", "--csv").output.splitlines()
    header = table[0].split(",")
    assert {"lr", "loss:last", "loss:min"} <= set(header)
    assert len(table) == 3

    by_loss = invoke(store, "log", "train", "--sort-by", "loss:min", "--json").output
    mins = [r["metrics"]["loss"]["min"] for r in json.loads(by_loss)]
    assert mins == sorted(mins)
    desc = json.loads(
        invoke(store, "log", "--sort-by", "lr", "--sort-order", "desc", "--json").output
    )
    assert [r["args"].get("lr") for r in desc][:2] == [0.2, 0.1]

    md = invoke(store, "log", "--md").output
    assert md.startswith("| id |")


def test_show_by_prefix_and_by_function(project: dict[str, Any]) -> None:
    store, newest = project["store"], project["records"][0]
    result = invoke(store, "show", newest["id"][:6], "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert set(record) >= SHOW_FIELDS
    assert record["id"] == newest["id"]
    assert {"lib:train", "lib:helper"} <= set(record["code"]["deps"])
    assert record["code"]["digest"]
    assert record["args"]["lr"] == 0.2
    data = record["args"]["data"]
    assert data["shape"] == [4, 3] and "float32" in data["dtype"]
    weights = record["result"]["items"]["w"]
    assert weights["shape"] == [4, 3]
    assert set(record["metrics"]["loss"]) >= {"count", "first", "last", "min", "max"}
    assert record["metrics"]["loss"]["count"] == 5
    assert record["provenance"]["python"]
    assert record["parents"] == newest["parents"]

    proc = run_cli(store, "show", newest["id"][:6], "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"] == newest["id"]

    text = invoke(store, "show", "train").output
    assert newest["id"] in text
    for heading in ("arguments", "result", "metrics", "provenance", "lib:helper"):
        assert heading in text
    proc = run_cli(store, "show", "lib:train")
    assert proc.returncode == 0 and newest["id"] in proc.stdout

    prepare = json.loads(invoke(store, "show", "prepare", "--json").output)
    assert set(prepare["children"]) == {r["id"] for r in project["records"][:2]}


def test_diff_reports_changed_arguments_and_the_helper_source(project: dict[str, Any]) -> None:
    store = project["store"]
    result = invoke(store, "diff", "train~1", "train", "--json")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.output)
    assert set(diff) >= {"args", "code", "result", "metrics"}
    assert diff["args"]["lr"]["a"] == 0.1 and diff["args"]["lr"]["b"] == 0.2
    assert "data" not in diff["args"]
    changed = {c["symbol"]: c for c in diff["code"]["changed"]}
    assert set(changed) == {"lib:helper"}
    patch = changed["lib:helper"]["diff"]
    assert "--- a/lib:helper" in patch and "+++ b/lib:helper" in patch
    assert "-    return x * 2" in patch and "+    return x * 3" in patch
    tensors = {t["path"]: t for t in diff["result"]["tensors"]}
    assert tensors["['w']"]["max_abs_diff"] > 0 and tensors["['w']"]["rel_norm"] > 0
    assert diff["metrics"]["loss"]["delta_last"] != 0

    proc = run_cli(store, "diff", "train~1", "train", cwd=project["root"])
    assert proc.returncode == 0, proc.stderr
    assert "lr: 0.1 -> 0.2" in proc.stdout
    assert "+    return x * 3" in proc.stdout
    assert "max abs diff" in proc.stdout


def test_diff_one_revision_says_why_it_would_miss(project: dict[str, Any]) -> None:
    store, proj = project["store"], project["proj"]
    proc = run_cli(store, "diff", "train~1", "--json", cwd=proj)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["verdict"] == "miss"
    assert any("lib:helper" in reason for reason in verdict["reasons"])
    assert "+    return x * 3" in verdict["code"]["changed"][0]["diff"]

    proc = run_cli(store, "diff", "train", cwd=proj)
    assert proc.returncode == 0, proc.stderr
    assert "would hit" in proc.stdout


@pytest.mark.parametrize(
    "args", [["show", "nonexistent"], ["show", "abcd"], ["diff", "train", "zzzz9"]]
)
def test_unknown_revision_is_one_line_exit_1(project: dict[str, Any], args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--store", str(project["store"]), *args])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert "memostore log" in result.output  # names the way out

    proc = run_cli(project["store"], *args)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_no_store_is_one_line_exit_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "absent"), "log"])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "--store" in result.output
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["log", "--json", "--csv"],
        ["show"],
        ["nope"],
        ["log", "-n", "-1"],
        ["gc", "--grace", "soon"],
    ],
)
def test_usage_errors_exit_2(project: dict[str, Any], args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--store", str(project["store"]), *args])
    assert result.exit_code == 2, result.output


def test_usage_error_exit_2_in_a_subprocess(project: dict[str, Any]) -> None:
    proc = run_cli(project["store"], "log", "--json", "--md")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_log_of_an_unknown_function_is_exit_1(project: dict[str, Any]) -> None:
    result = CliRunner().invoke(cli, ["--store", str(project["store"]), "log", "nosuchfn"])
    assert result.exit_code == 1 and "memostore log" in result.output


def test_default_store_comes_from_the_environment(
    project: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMOSTORE_DIR", str(project["store"]))
    result = CliRunner().invoke(cli, ["log", "--json"])
    assert result.exit_code == 0
    assert len(json.loads(result.output)) == 3


def test_piped_output_has_no_escape_codes(project: dict[str, Any]) -> None:
    for args in (["log"], ["show", "train"], ["diff", "train~1", "train"]):
        proc = run_cli(project["store"], *args, cwd=project["proj"])
        assert proc.returncode == 0, proc.stderr
        assert "\x1b[" not in proc.stdout


def test_failed_evaluations_are_listed_and_shown(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = tmp_path / "fail.py"
    script.write_text(
        textwrap.dedent(
            """
            from memostore import memo

            @memo
            def boom(n):
                raise ValueError(f"bad n {n}")

            try:
                boom(3)
            except ValueError:
                pass
            """
        )
    )
    run_script(script, env={"MEMOSTORE_DIR": str(store)})
    records = json.loads(invoke(store, "log", "--json").output)
    assert [r["status"] for r in records] == ["error"]
    assert records[0]["error"].endswith("ValueError")
    text = invoke(store, "show", "boom").output
    assert "bad n 3" in text


def test_terminal_output_renders_every_command(
    project: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the same commands draw with rich; none may fail doing so."""
    import memostore_cli.output as output

    monkeypatch.setattr(output, "_isatty", lambda stream: True)
    monkeypatch.chdir(project["proj"])
    store = project["store"]
    for args in (
        ["log"],
        ["log", "--graph"],
        ["log", "--metrics", "loss", "--sort-by", "loss:min"],
        ["show", "train"],
        ["diff", "train~1", "train"],
        ["diff", "train~1"],
        ["fsck"],
        ["gc", "--dry-run"],
    ):
        result = invoke(store, *args)
        assert result.exit_code == 0, (args, result.output)
        assert result.output.strip()
