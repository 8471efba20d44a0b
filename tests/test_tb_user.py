"""A TensorBoard user's script with only the import swapped, beside it on torch's writer.

The script sweeps lr and seed over five runs, each a process of its own (as a
user runs it from the shell): once with ``from torch.utils.tensorboard
import SummaryWriter``, once with ``from memostore import SummaryWriter``.
TensorBoard's own readers (:mod:`tb_reader`) read torch's files; the
dashboard, the CLI and the export are then compared with what TensorBoard
shows: the runs by name, their tags and values, the hparams sessions, and
what ``memostore diff`` says of two runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_script, write_script

pytest.importorskip("tensorboard")
pytest.importorskip("starlette")
import tb_reader
from ui_support import get_json, ui_server

pytestmark = pytest.mark.slow

SCRIPT = """
    import argparse
    import math
    from torch.utils.tensorboard import SummaryWriter

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    writer = SummaryWriter(f"runs/lr{args.lr}_seed{args.seed}")
    for step in range(30):
        writer.add_scalar("train/loss", math.exp(-args.lr * step) + args.seed * 0.01, step)
        if step % 5 == 0:
            writer.add_scalar("val/acc", 1 - math.exp(-args.lr * step), step)
    accuracy = 1 - math.exp(-args.lr * 30)
    writer.add_hparams({"lr": args.lr, "seed": args.seed}, {"hparam/val_acc": accuracy})
    writer.close()
"""
SWAPPED = SCRIPT.replace("from torch.utils.tensorboard import", "from memostore import")
GRID = [(0.1, 1), (0.1, 2), (0.01, 1), (0.01, 2), (0.3, 4)]
NAMES = {f"lr{lr}_seed{seed}" for lr, seed in GRID}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sweep run with torch's writer (in ``torch/``) and with memostore's (in ``memo/``)."""
    root = tmp_path_factory.mktemp("sweep")
    store = root / "store"
    for side, source in (("torch", SCRIPT), ("memo", SWAPPED)):
        (root / side).mkdir()
        script = write_script(root / side, "train_tb.py", source)
        for lr, seed in GRID:
            args = ("--lr", str(lr), "--seed", str(seed))
            run_script(script, *args, env={"MEMOSTORE_DIR": str(store)})
    return {"root": root, "store": store, "runs": root / "torch" / "runs"}


def _cli(store: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_log_and_show_name_the_runs_as_tensorboard_does(sweep: dict[str, Path]) -> None:
    records = json.loads(_cli(sweep["store"], "log", "--json"))
    shown_by_tensorboard = {run.split("/")[0] for run in tb_reader.scalars(sweep["runs"])}
    assert {r["name"] for r in records} == NAMES == shown_by_tensorboard
    assert all(r["function"] == "run:train_tb.py" for r in records)
    newest = records[0]
    text = _cli(sweep["store"], "log").splitlines()
    assert text[0].split()[:2] == [newest["id"][:10], newest["name"]]
    shown = json.loads(_cli(sweep["store"], "show", newest["id"][:8], "--json"))
    assert shown["name"] == newest["name"] == "lr0.3_seed4"


def test_diff_of_two_runs_shows_their_arguments(sweep: dict[str, Path]) -> None:
    records = {r["name"]: r["id"] for r in json.loads(_cli(sweep["store"], "log", "--json"))}
    out = json.loads(
        _cli(sweep["store"], "diff", records["lr0.1_seed1"], records["lr0.01_seed2"], "--json")
    )
    assert set(out["args"]) == {"lr", "seed", "argv"}
    assert out["code"]["same"] is True and out["code"]["a"]  # the script's digest, recorded
    text = _cli(sweep["store"], "diff", records["lr0.1_seed1"], records["lr0.01_seed2"])
    assert "lr: 0.1 -> 0.01" in text and "seed: 1 -> 2" in text


def _ui_scalars(url: str) -> dict[tuple[str, str], dict[str, list[tuple[int, float]]]]:
    """(run, sub-run kind) -> tag -> [(step, value as float32)], as the dashboard serves them."""
    _, listing = get_json(url + "api/runs")
    out: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = {}
    for row in listing["rows"]:
        _, page = get_json(url + f"api/eval/{row['id']}")
        for run in page["runs"]["runs"]:
            where = (row["name"], "session" if run["kind"] == "hparams" else run["dir"])
            for name, tag in run["tags"].items():
                query = urllib.parse.urlencode({"ids": row["id"], "tag": name, "buckets": 5000})
                _, chart = get_json(url + "api/chart?" + query)
                (series,) = chart["series"]
                assert series["name"] == row["name"] and not series["downsampled"]
                values = np.float32(series["y"]).tolist()  # TensorBoard keeps float32
                out.setdefault(where, {})[tag] = list(zip(series["x"], values, strict=True))
    return out


def _tb_scalars(runs: Path) -> dict[tuple[str, str], dict[str, list[tuple[int, float]]]]:
    hparams_runs = {g["name"] for g in tb_reader.sessions(runs)["groups"]}
    out = {}
    for run, tags in tb_reader.scalars(runs).items():
        top = run.split("/", 1)[0]
        out[(top, "session" if run in hparams_runs else "")] = tags
    return out


def test_the_dashboard_shows_what_tensorboard_shows(sweep: dict[str, Path]) -> None:
    with ui_server(sweep["store"]) as url:
        ours = _ui_scalars(url)
        _, hparams = get_json(url + "api/sessions")
    theirs = _tb_scalars(sweep["runs"])
    # The same runs (and the session run of each add_hparams call), tags and values.
    assert set(theirs) == {(n, k) for n in NAMES for k in ("", "session")}
    assert ours == theirs
    # The same hparams sessions: columns, and each session's values and metric.
    tb = tb_reader.sessions(sweep["runs"])
    assert len(tb["groups"]) == len(hparams["sessions"]) == len(GRID)
    assert hparams["metrics"] == tb["metrics"] == ["hparam/val_acc"]
    assert {h["name"]: h["type"] for h in hparams["hparams"]} == {"lr": "number", "seed": "number"}
    assert set(tb["hparams"]) == {"lr", "seed"}

    def by_run(sessions: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            s["name"].rsplit("/", 1)[0]: (
                {k: float(v) for k, v in s["hparams"].items()},
                {k: float(np.float32(v)) for k, v in s["metrics"].items()},
            )
            for s in sessions
        }

    assert by_run(hparams["sessions"]) == by_run(tb["groups"])
