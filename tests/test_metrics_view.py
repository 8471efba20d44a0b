"""Viewing logs: the reader API, terminal plots, TensorBoard export."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.metrics_cmds import register

from memostore import MemostoreError, Store
from memostore.metrics import metrics_summary, sparkline
from memostore.metrics.journal import Contents
from memostore.metrics.plot import Curve, column_spans, ema_smooth, render
from memostore.metrics.seal import seal
from memostore.metrics.tb_export import export_tensorboard
from memostore.odb.objects import Links
from memostore.records.evaluation import Evaluation, evaluation_doc

TRAIN = """
import math, sys
from memostore import memo
from memostore.tensorboard import SummaryWriter

@memo
def train(lr: float, steps: int):
    print("body ran")
    w = SummaryWriter()
    for i in range(steps):
        w.add_scalar("loss", 2.0 * math.exp(-lr * i) + 0.01 * math.sin(i), i)
    w.add_hparams({"batch": 64}, {"hparam/final": 0.5})
    return lr

train(float(sys.argv[1]), 100)
"""


def _expected_loss(lr: float) -> list[float]:
    import math

    return [2.0 * math.exp(-lr * i) + 0.01 * math.sin(i) for i in range(100)]


def _cli() -> click.Group:
    group = click.Group("memostore")
    register(group)
    return group


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, str]:
    """A store where train.py ran once and then hit (shared: the two runs cost seconds)."""
    directory = tmp_path_factory.mktemp("trained")
    env = {"MEMOSTORE_DIR": str(directory / "store")}
    script = write_script(directory, "train.py", TRAIN)
    assert "body ran" in run_script(script, "0.05", env=env).stdout
    assert "body ran" not in run_script(script, "0.05", env=env).stdout  # a hit
    store = Store(directory / "store", create=False)
    (evaluation_id,) = [eid for name, eid in store.iter_evaluation_refs()]
    return store, evaluation_id


def _invoke(store: Store, args: list[str]) -> Any:
    return CliRunner().invoke(_cli(), args, env={"MEMOSTORE_DIR": str(store.root)})


def test_a_hit_shows_the_logs_of_the_evaluation_that_ran(trained: tuple[Store, str]) -> None:
    store, evaluation_id = trained
    expected = _expected_loss(0.05)
    summary = metrics_summary(store, Evaluation.load(store, evaluation_id).logs_id)
    loss = summary["loss"]
    assert loss["kind"] == "scalar" and loss["count"] == 100
    assert (loss["step_min"], loss["step_max"], loss["nan_count"]) == (0, 99, 0)
    assert loss["first"] == expected[0] and loss["last"] == expected[-1]
    assert loss["min"] == min(expected) and loss["max"] == max(expected)


def test_show_json_reports_the_logged_loss(trained: tuple[Store, str]) -> None:
    import json

    from memostore_cli.main import cli

    store, evaluation_id = trained
    result = CliRunner().invoke(cli, ["--store", str(store.root), "show", "train", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["id"] == evaluation_id
    loss = record["metrics"]["loss"]
    expected = _expected_loss(0.05)
    assert loss["count"] == 100
    assert (loss["first"], loss["last"]) == (expected[0], expected[-1])
    assert (loss["min"], loss["max"]) == (min(expected), max(expected))


def test_export_tensorboard_reads_back_in_one_run(
    trained: tuple[Store, str], tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store, evaluation_id = trained
    result = _invoke(
        store, ["export", "tensorboard", evaluation_id[:8], "--logdir", str(tmp_path / "tb")]
    )
    assert result.exit_code == 0, result.output
    # The only evaluation exported is named by its function alone.
    (run_dir,) = (tmp_path / "tb").iterdir()
    assert run_dir.name == "train"
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars("loss")
    assert [e.step for e in events] == list(range(100))
    assert [e.value for e in events] == np.float32(_expected_loss(0.05)).tolist()
    # add_hparams is a session run of its own below the writer's, as torch writes it,
    # and the only session: the main run is none.
    assert not acc._plugin_to_tag_to_content.get("hparams")
    (session_dir,) = [d for d in run_dir.iterdir() if d.is_dir()]
    session = EventAccumulator(str(session_dir), size_guidance={"scalars": 0})
    session.Reload()
    assert session.Scalars("hparam/final")[0].value == 0.5
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(
        session.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info
    assert dict(start.hparams) == {"batch": start.hparams["batch"]}
    assert start.hparams["batch"].number_value == 64


def test_export_without_tensorboard_names_the_extra(
    trained: tuple[Store, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, evaluation_id = trained
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(MemostoreError, match=r"pip install '\.\[tensorboard\]' in your"):
        export_tensorboard(store, [evaluation_id], tmp_path / "tb")
    result = _invoke(
        store, ["export", "tensorboard", evaluation_id, "--logdir", str(tmp_path / "tb")]
    )
    assert result.exit_code != 0
    assert "pip install '.[tensorboard]'" in str(result.exception or result.output)


def test_plot_overlays_evaluations(trained: tuple[Store, str]) -> None:
    store, first = trained
    run_script(store.root.parent / "train.py", "0.2", env={"MEMOSTORE_DIR": str(store.root)})
    second = next(eid for _, eid in store.iter_evaluation_refs() if eid != first)
    for x_mode in ("step", "wall", "relative"):
        size = ["--width", "70", "--height", "10"]
        result = _invoke(
            store, ["plot", first, second, "--tag", "loss", "--smooth", "0.6", "--x", x_mode, *size]
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == "loss  (smoothed 0.6)"
        assert any(first[:8] in line for line in lines[-2:])
        assert any(second[:8] in line for line in lines[-2:])
        assert all(len(line) <= 70 for line in lines[1:-2])
    missing = _invoke(store, ["plot", first, "--tag", "nope"])
    assert missing.exit_code != 0 and "loss" in str(missing.exception)


def _plot_seconds(n: int) -> tuple[float, str]:
    """The best of three ``memostore plot`` runs over a curve of *n* points, and its output."""
    rng = np.random.default_rng(0)
    values = np.exp(-np.arange(n) / (0.3 * n)) + 0.01 * rng.standard_normal(n)
    values[n // 8] = 50.0  # one spike
    contents = Contents(
        header={},
        scalars={
            "loss": [
                (
                    np.arange(n, dtype="<i8").tobytes(),
                    values.astype("<f8").tobytes(),
                    (1.7e9 + np.arange(n) * 1e-3).tobytes(),
                )
            ]
        },
    )
    store = Store.default()
    logs_id = seal(store.objects, contents)
    fields = {"function": f"bench:plot{n}", "status": "ok", "logs": logs_id, "started": 0.0}
    doc = evaluation_doc(fields, Links())
    store.objects.add_doc(doc)
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        result = CliRunner().invoke(_cli(), ["plot", doc.id, "--tag", "loss", "--width", "120"])
        best = min(best, time.perf_counter() - t0)
        assert result.exit_code == 0, result.output
    return best, result.output


def test_plot_of_a_million_points_is_fast(store_dir: Path) -> None:
    """A million points cost under 100 plots of a thousand (about 40 measured): the work per
    point is vectorised, as a Python loop over them alone would take longer than that. A
    ratio, not a time, so that a loaded machine slows both sides alike."""
    small, _ = _plot_seconds(1_000)
    big, output = _plot_seconds(1_000_000)
    assert big < 100 * small, (big, small)
    assert output.splitlines()[1].lstrip().startswith("50 ┤")  # the spike is the top


def test_ema_matches_tensorboards_definition() -> None:
    rng = np.random.default_rng(1)
    y = rng.standard_normal(20_000) * 3 + 10
    y[[5, 700, 19_999]] = [np.nan, np.inf, -np.inf]
    for weight in (0.0, 0.3, 0.6, 0.9, 0.999):
        expected, last, seen = [], 0.0, 0
        for v in y:
            if not np.isfinite(v):
                expected.append(v)
                continue
            last = last * weight + (1 - weight) * v
            seen += 1
            expected.append(last / (1 - weight**seen) if weight else v)
        np.testing.assert_allclose(ema_smooth(y, weight), expected, rtol=1e-9)
    np.testing.assert_array_equal(ema_smooth(np.full(5, 2.0), 0.9), np.full(5, 2.0))


def test_min_max_buckets_keep_spikes() -> None:
    x = np.arange(100_000, dtype=float)
    y = np.zeros_like(x)
    y[31_337] = 9.0
    y[77_000] = -4.0
    lo, hi = column_spans(x, y, 0.0, x[-1], 50)
    assert np.nanmax(hi) == 9.0 and np.nanmin(lo) == -4.0
    text = render([Curve("c", x, y)], width=60, height=8, color=False)
    assert text.splitlines()[0].lstrip().startswith("9 ┤")
    assert text.splitlines()[7].lstrip().startswith("-4 ┤")


def test_sparkline() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8], width=8) == "▁▂▃▄▅▆▇█"
    assert sparkline(np.linspace(0, 1, 1000), width=4) == "▁▃▆█"
    assert sparkline([np.nan, 1.0], width=2)[0] == " "


def test_sparkline_draws_a_constant_series_flat() -> None:
    # The means of runs of a constant differ in their last bits (summing 0.001
    # in float32 and dividing): that noise is not a wave.
    lr = np.full(997, 1e-3, dtype=np.float32)
    line = sparkline(lr, width=20)
    assert len(set(line)) == 1, line
    noisy = np.float64(1e-3) * (1 + np.tile([0.0, 3e-9], 10))
    assert len(set(sparkline(noisy, width=20))) == 1
    # A real change of a small quantity is still drawn at full height.
    assert sparkline([1e-3, 1e-3, 2e-3, 2e-3], width=4) == "▁▁██"
    assert sparkline([0.0, 0.0, 1e-12], width=3) == "▁▁█"
    assert sparkline([], width=5) == ""
    assert len(sparkline(np.arange(3.0), width=20)) == 3
