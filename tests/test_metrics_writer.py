"""SummaryWriter and log(): the drop-in surface, and where points land."""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import run_script, write_script

import memostore.metrics as metrics
from memostore import MemostoreWarning, Store, memo
from memostore.metrics import SummaryWriter, load_events, load_series, metrics_summary
from memostore.records import standalone
from memostore.records.evaluation import Evaluation, failed_ref_name
from memostore.tensorboard import SummaryWriter as TBWriter

TRAINING_SCRIPT = """
import torch
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()
for step in range(20):
    writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.add_scalars("acc", {"train": step / 20, "val": step / 25}, step)
writer.add_text("notes", "first *run*", 0)
writer.add_histogram("weights", torch.randn(500), 3)
writer.add_image("sample", torch.rand(3, 16, 12), 3)
writer.add_images("batch", torch.rand(5, 1, 4, 4), 3)
writer.add_hparams({"lr": 0.1, "opt": "sgd", "nesterov": True}, {"hparam/acc": 0.75})
writer.flush()
writer.close()
print("done")
"""


def _summary(store: Store, evaluation: Evaluation) -> dict:
    assert evaluation.logs_id, "the evaluation has no logs"
    return metrics_summary(store, evaluation.logs_id)


def test_training_script_runs_unchanged_after_import_swap(store_dir: Path, tmp_path: Path) -> None:
    original = write_script(tmp_path, "train_tb.py", TRAINING_SCRIPT)
    run_script(original)  # the script is valid for TensorBoard's own writer
    swapped = TRAINING_SCRIPT.replace(
        "from torch.utils.tensorboard import", "from memostore.tensorboard import"
    )
    proc = run_script(write_script(tmp_path, "train_ms.py", swapped))
    assert proc.stdout.strip() == "done"
    assert "Warning" not in proc.stderr, proc.stderr

    store = Store(store_dir, create=False)
    runs = [eid for name, eid in store.iter_evaluation_refs() if name.startswith("runs/")]
    assert len(runs) == 1
    evaluation = Evaluation.load(store, runs[0])
    assert evaluation.function == "run:train_ms.py"
    summary = _summary(store, evaluation)
    assert summary["loss"]["count"] == 20 and summary["loss"]["last"] == 1.0 / 20
    assert summary["acc/train"]["count"] == 20 and summary["acc/val"]["count"] == 20
    kinds = {tag: s["kind"] for tag, s in summary.items()}
    assert kinds["notes"] == "text" and kinds["weights"] == "histogram"
    assert kinds["sample"] == kinds["batch"] == "image"
    assert summary["hparam/acc"]["last"] == 0.75
    assert evaluation.hparams == {"lr": 0.1, "opt": "sgd", "nesterov": True}
    (image,) = load_events(store, evaluation.logs_id, "sample")
    assert (image["height"], image["width"], image["channels"]) == (16, 12, 3)
    assert store.objects.get_bytes(image["blob"]).startswith(b"\x89PNG")
    (grid,) = load_events(store, evaluation.logs_id, "batch")
    # Grey images are tiled into one RGB image, as torch's writer makes them.
    assert (grid["height"], grid["width"], grid["channels"]) == (4, 20, 3)
    (hist,) = load_events(store, evaluation.logs_id, "weights")
    assert hist["num"] == 500 and sum(hist["counts"]) == 500


def test_writer_attaches_to_the_innermost_memoised_call(store_dir: Path) -> None:
    writer = SummaryWriter("ignored/dir")

    @memo(ignore=("w",))
    def inner(n: int, w):
        for i in range(n):
            w.add_scalar("inner", float(i), i)
        return n

    @memo(ignore=("w",))
    def outer(n: int, w):
        w.add_scalar("outer", 1.0, 0)
        inner(n, w)
        w.add_scalar("outer", 2.0, 1)
        return n

    outer(3, writer)
    store = Store.default()
    outer_summary = _summary(store, outer.lookup(3, None))
    inner_summary = _summary(store, inner.lookup(3, None))
    assert set(outer_summary) == {"outer"} and outer_summary["outer"]["count"] == 2
    assert set(inner_summary) == {"inner"} and inner_summary["inner"]["count"] == 3
    # The writer's directory exists, as torch's writer makes it; no event file is in it.
    assert Path("ignored/dir").is_dir() and not any(Path("ignored/dir").iterdir())
    assert writer.get_logdir() == "ignored/dir"


def test_tensorboard_semantics_of_steps_and_tags(store_dir: Path) -> None:
    @memo
    def run(k: int):
        with TBWriter() as w:
            w.add_scalar("a", 1.5)  # no step: TensorBoard records step 0
            w.add_scalar("a", np.float32(2.5), np.int64(7))
            w.add_scalars("main", {"x": 1, "y": np.float64(2.0)}, 4)
            w.add_histogram_raw("h", 0.0, 2.0, 3, 3.0, 5.0, [0.0, 1.0, 2.0], [0, 1, 2], 1)
        return k

    run(1)
    store = Store.default()
    logs = run.lookup(1).logs_id
    steps, values, _ = load_series(store, logs, "a")
    assert steps.tolist() == [0, 7] and values.tolist() == [1.5, 2.5]
    assert load_series(store, logs, "main/x")[1].tolist() == [1.0]
    assert load_series(store, logs, "main/y")[0].tolist() == [4]
    (h,) = load_events(store, logs, "h")
    assert h["counts"] == [0.0, 1.0, 2.0] and h["step"] == 1


def test_methods_torch_lacks_warn_once_and_nan_points_are_kept(store_dir: Path) -> None:
    @memo
    def run(k: int):
        w = SummaryWriter()
        w.add_scalar("ok", 1.0, 0)
        w.add_something_new(1, 2)
        w.add_something_new(3, 4)
        w.add_scalar("ok", math.nan, 1)
        return k

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(1)
    messages = [str(c.message) for c in caught if issubclass(c.category, MemostoreWarning)]
    assert sum("add_something_new" in m for m in messages) == 1
    summary = _summary(Store.default(), run.lookup(1))
    assert summary["ok"]["count"] == 2 and summary["ok"]["nan_count"] == 1
    with pytest.raises(AttributeError):
        SummaryWriter().not_a_writer_method  # noqa: B018 - only add_* names are forgiven


def test_native_log_counts_its_own_steps(store_dir: Path) -> None:
    @memo
    def run(k: int):
        for i in range(3):
            metrics.log({"loss": 1.0 / (i + 1), "opt": {"lr": 0.1}})
        metrics.log({"loss": 0.0, "note": "jump", "w": np.arange(10.0)}, step=10)
        metrics.log({"loss": -1.0})
        return k

    run(1)
    store = Store.default()
    logs = run.lookup(1).logs_id
    steps, values, _ = load_series(store, logs, "loss")
    assert steps.tolist() == [0, 1, 2, 10, 11]
    assert values.tolist() == [1.0, 0.5, 1 / 3, 0.0, -1.0]
    assert load_series(store, logs, "opt/lr")[0].tolist() == [0, 1, 2]
    assert load_events(store, logs, "note")[0]["text"] == "jump"
    assert load_events(store, logs, "w")[0]["num"] == 10


def test_failed_call_keeps_its_logs(store_dir: Path) -> None:
    @memo
    def fails(n: int):
        w = SummaryWriter()
        for i in range(n):
            w.add_scalar("loss", float(i), i)
        raise RuntimeError("diverged")

    with pytest.raises(RuntimeError, match="diverged"):
        fails(5)
    store = Store.default()
    evaluation_id = store.refs.read(failed_ref_name(fails.symbol, fails.key(5)))
    evaluation = Evaluation.load(store, evaluation_id)
    assert evaluation.status == "error"
    assert _summary(store, evaluation)["loss"]["count"] == 5
    assert not list((store.root / "journal").glob("*.journal"))


def test_logging_outside_memo_records_standalone_runs(store_dir: Path) -> None:
    # A writer outside memoised calls is a run evaluation of its own, as each
    # TensorBoard writer is its own run; memostore.log's points go to the script's run.
    w = SummaryWriter()
    w.add_scalar("x", 3.0, 0)
    metrics.log({"y": 4.0})
    w.close()
    script_run = standalone.finish_run()
    assert script_run is not None
    store = Store.default()
    runs = {
        frozenset(_summary(store, Evaluation.load(store, e))): Evaluation.load(store, e)
        for name, e in store.iter_evaluation_refs()
        if name.startswith("runs/")
    }
    assert set(runs) == {frozenset({"x"}), frozenset({"y"})}
    assert all(e.function.startswith("run:") for e in runs.values())
    assert runs[frozenset({"y"})].id == script_run
    # A closed writer used again starts a new run; a run that logs nothing is not recorded.
    w.add_scalar("x", 5.0, 1)
    w.close()
    assert len([n for n, _ in store.iter_evaluation_refs() if n.startswith("runs/")]) == 3
    assert standalone.finish_run() is None


def test_public_names() -> None:
    import memostore

    assert memostore.SummaryWriter is TBWriter is SummaryWriter
    assert memostore.log is metrics.log


def test_tensorboardx_spellings_of_media_methods(store_dir: Path) -> None:
    # tensorboardX's add_image_with_boxes takes dataformats where torch's takes rescale,
    # its add_video takes dataformats, its add_onnx_graph names its file onnx_model_file.
    pytest.importorskip("PIL")
    image = np.zeros((6, 10, 3), dtype=np.uint8)  # HWC: 6 high, 10 wide
    boxes = np.array([[1, 1, 4, 4]])
    with SummaryWriter("runs/x") as w:
        w.add_image_with_boxes("torch", image, boxes, 0, None, 1, "HWC", ["a"])
        w.add_image_with_boxes("tbx", image, boxes, 0, None, "HWC", ["a"])
        with pytest.raises(AssertionError):  # tensorboardX's convert_to_NTCHW refuses it
            w.add_video("v", np.zeros((2, 4, 4, 3)), 0, dataformats="NTHW")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w.add_video("v", np.zeros((1, 2, 4, 6, 3)), 0, dataformats="NTHWC")
        if importlib.util.find_spec("onnx") is None:
            with pytest.raises(ImportError):  # torch's ImportError without onnx, no TypeError
                w.add_onnx_graph(onnx_model_file="model.onnx")
    store = Store.default()
    (run,) = [e for name, e in store.iter_evaluation_refs() if name.startswith("runs/")]
    logs = Evaluation.load(store, run).logs_id
    (ours,), (theirs,) = load_events(store, logs, "torch"), load_events(store, logs, "tbx")
    assert (theirs["height"], theirs["width"]) == (6, 10)
    assert theirs["blob"] == ours["blob"]
    videos = load_events(store, logs, "v") if "v" in metrics_summary(store, logs) else []
    if videos:  # moviepy 1.x installed: the GIF has the frames' size
        assert (videos[0]["height"], videos[0]["width"]) == (4, 6)
    else:
        assert any("add_video recorded nothing" in str(c.message) for c in caught)
