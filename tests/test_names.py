"""The names evaluations are shown by (``memostore.records.names``), and where they appear."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from memostore_cli.main import cli

from memostore import SummaryWriter, memo
from memostore.records.names import display_names, log_root


def _record(n: int, function: str, args: dict, run_name: str | None = None) -> dict:
    return {"id": str(n) * 64, "function": function, "args": args, "run_name": run_name}


def test_run_names_are_relative_to_the_log_root_tensorboard_is_pointed_at() -> None:
    assert log_root(["runs/a", "runs/b"]) == "runs"
    assert log_root(["runs/x/a", "runs/y/b"]) == "runs"
    assert log_root(["/data/tb/a", "/data/tb/b"]) == "/data/tb"
    assert log_root(["runs/a", "logs/b"]) == ""
    records = [
        _record(1, "run:train.py", {"lr": 0.1}, "runs/lr0.1_seed4"),
        _record(2, "run:train.py", {"lr": 0.01}, "runs/Jan01_10-00-00_host_comment"),
    ]
    assert list(display_names(records).values()) == ["lr0.1_seed4", "Jan01_10-00-00_host_comment"]
    assert list(display_names(records[:1]).values()) == ["lr0.1_seed4"]


def test_calls_are_named_by_function_and_the_arguments_that_differ() -> None:
    records = [
        _record(1, "lib:train", {"lr": 0.1, "seed": 4, "epochs": 3}),
        _record(2, "lib:train", {"lr": 0.01, "seed": 4, "epochs": 3}),
        _record(3, "lib:train", {"lr": 0.01, "seed": 5, "epochs": 3}),
        _record(4, "lib:prepare", {"n": 10}),
    ]
    names = list(display_names(records).values())
    assert names == [
        "train lr=0.1 seed=4",
        "train lr=0.01 seed=4",
        "train lr=0.01 seed=5",
        "prepare",
    ]


def test_a_name_several_evaluations_would_share_gets_their_short_ids() -> None:
    records = [_record(1, "lib:train", {"lr": 0.1}), _record(2, "lib:train", {"lr": 0.1})]
    assert list(display_names(records).values()) == [
        "train (11111111)",
        "train (22222222)",
    ]


@memo
def train(lr: float, seed: int) -> float:
    with SummaryWriter() as writer:  # TensorBoard's default log_dir: named by the call
        writer.add_scalar("loss", lr, 0)
    return lr


@memo
def tuned(lr: float) -> float:
    with SummaryWriter(f"runs/tuned_{lr}") as writer:  # a log_dir given: named by it
        writer.add_scalar("loss", lr, 0)
    return lr


def test_log_and_show_print_the_names(store_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for lr, seed in ((0.1, 4), (0.01, 4)):
        train(lr, seed)
        tuned(lr)
    runner = CliRunner()
    listed = json.loads(runner.invoke(cli, ["log", "--json"]).output)
    names = {r["name"] for r in listed}
    assert names == {"train lr=0.1", "train lr=0.01", "tuned_0.1", "tuned_0.01"}
    text = runner.invoke(cli, ["log"]).output
    assert "tuned_0.1" in text  # TensorBoard's run names have a column of their own
    shown = json.loads(runner.invoke(cli, ["show", "train", "--json"]).output)
    assert shown["name"] == "train lr=0.01"
    assert "name       train lr=0.01" in runner.invoke(cli, ["show", "train"]).output
