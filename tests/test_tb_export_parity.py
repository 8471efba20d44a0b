"""memostore's writer, exported, against torch's writer: what TensorBoard's readers see.

The same calls go through ``torch.utils.tensorboard.SummaryWriter`` and,
inside a memoised call, through memostore's writer; memostore's evaluation
is exported with ``export_tensorboard``; both directories are then read with
TensorBoard's own ``EventAccumulator`` and compared tag by tag: steps, wall
times (where the caller gave them), values, plugin metadata and decoded
images. Differences torch's writer makes by design (a run per ``add_scalars``
key or per ``add_hparams`` call) are outside these calls.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard")
pytest.importorskip("PIL")

from PIL import Image  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402

from memostore import Store, memo  # noqa: E402
from memostore import SummaryWriter as MemoWriter  # noqa: E402
from memostore.metrics.tb_export import export_tensorboard  # noqa: E402

_ALL = {"scalars": 0, "images": 0, "audio": 0, "histograms": 0, "distributions": 0, "tensors": 0}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.out(torch.relu(self.fc(x)))


def log_everything(w: Any, base: float) -> None:
    """Every add_* method; explicit wall times first, the calls that take none last."""
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    n = iter(range(1000))

    def wall() -> float:
        return base + next(n) * 1e-3

    w.add_scalar("loss", 0.1234567891, 0, walltime=wall())
    w.add_scalar("loss", 0.5, 1, walltime=wall())
    w.add_scalar("loss", torch.tensor(0.25), 2, walltime=wall())
    w.add_scalar("old/double", 0.1234567891, 0, walltime=wall(), double_precision=True)
    w.add_scalar("new/float", 0.1234567891, 0, walltime=wall(), new_style=True)
    w.add_scalar(
        "new/double", 0.1234567891, 0, walltime=wall(), new_style=True, double_precision=True
    )
    w.add_histogram("hist/default", rng.normal(size=1000), 0, walltime=wall())
    w.add_histogram("hist/max_bins", rng.normal(size=1000), 0, walltime=wall(), max_bins=25)
    w.add_histogram("hist/auto", np.arange(1024.0), 0, bins="auto", walltime=wall(), max_bins=5)
    w.add_histogram("hist/torch", torch.randn(300, generator=gen), 1, walltime=wall())
    w.add_histogram("hist/nonfinite", np.array([1.0, np.nan, np.inf, -2.0]), 0, walltime=wall())
    w.add_histogram_raw("hist/raw", 0.0, 2.0, 3, 3.0, 5.0, [0.0, 1.0, 2.0], [0, 1, 2], 0, wall())
    w.add_image("img/rgb", rng.random((3, 8, 6)), 0, walltime=wall())
    w.add_image("img/grey", rng.random((1, 8, 6)), 0, walltime=wall())
    w.add_image("img/hw", rng.random((8, 6)), 0, walltime=wall(), dataformats="HW")
    rgba = (rng.random((8, 6, 4)) * 255).astype(np.uint8)
    w.add_image("img/rgba", rgba, 0, walltime=wall(), dataformats="HWC")
    w.add_image("img/grey_alpha", rng.random((2, 8, 6)), 0, walltime=wall())
    w.add_image("img/nchw", rng.random((3, 3, 4, 4)), 0, walltime=wall(), dataformats="NCHW")
    w.add_images("img/batch", rng.random((10, 1, 4, 4)), 0, walltime=wall())
    w.add_images("img/nhwc", torch.rand(3, 5, 5, 3, generator=gen), 0, wall(), "NHWC")
    boxes = np.array([[2, 2, 20, 20], [10, 12, 30, 28]])
    image = rng.random((3, 32, 32))
    w.add_image_with_boxes("boxes/labels", image, boxes, 0, wall(), labels=["cat", "dog"])
    w.add_image_with_boxes("boxes/plain", image, boxes, 0, wall(), rescale=2)
    w.add_image_with_boxes("boxes/mismatch", image, boxes, 0, wall(), labels="one")
    # Tiled into one GIF through moviepy; without moviepy's editor neither writer records it.
    w.add_video("video", rng.random((3, 4, 3, 8, 8)), 0, fps=4, walltime=wall())
    w.add_video(
        "video/uint8",
        torch.randint(0, 255, (1, 2, 3, 6, 6), dtype=torch.uint8, generator=gen),
        1,
        2,
        wall(),
    )
    w.add_text("notes", "first *run*", 0, walltime=wall())
    w.add_text("notes", "a|b\n-|-\nc|d", 1, walltime=wall())
    w.add_audio("sound", np.sin(np.arange(4410) / 20.0), 0, sample_rate=22050, walltime=wall())
    w.add_audio("sound", torch.linspace(-1.5, 1.5, 100), 1, walltime=wall())  # clipped
    labels, predictions = rng.integers(0, 2, 100), rng.random(100)
    w.add_pr_curve("pr", labels, predictions, 0, walltime=wall())
    w.add_pr_curve("pr/weighted", labels, predictions, 0, 20, rng.random(100), wall())
    w.add_pr_curve(
        "pr/capped", torch.tensor(labels), torch.tensor(predictions), 0, 500, None, wall()
    )
    counts = ([75, 64, 21, 5, 0], [150, 105, 18, 0, 0], [0, 45, 132, 150, 150], [0, 11, 54, 70, 75])
    rates = ([0.3333333, 0.3786982, 0.5384616, 1.0, 0.0], [1.0, 0.8533334, 0.28, 0.0666667, 0.0])
    w.add_pr_curve_raw("pr/raw", *counts, *rates, 0, num_thresholds=5, walltime=wall())
    vertices = np.array([[[1, 1, 1], [-1, -1, 1], [1, -1, -1], [-1, 1, -1]]], dtype=float)
    colors = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 0, 255]]], dtype=int)
    faces = np.array([[[0, 2, 3], [0, 3, 1], [0, 1, 2], [1, 3, 2]]], dtype=int)
    config = {"camera": {"cls": "PerspectiveCamera", "fov": 75}}
    w.add_mesh("mesh", vertices, colors, faces, config, 0, wall())
    w.add_mesh("points", torch.rand(1, 50, 3, generator=gen), global_step=1, walltime=wall())
    for name, tensor in {
        "f16": torch.tensor([1.0, 2.5, -3.0], dtype=torch.float16),
        "bf16": torch.tensor([[0.5, -8.0]], dtype=torch.bfloat16),
        "f32": torch.rand(2, 3, generator=gen),
        "f64": torch.rand(4, dtype=torch.float64, generator=gen),
        "i64": torch.arange(-3, 3),
        "i8": torch.arange(-3, 3, dtype=torch.int8),
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "c64": torch.complex(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])),
        "scalar": torch.tensor(0.1),
        "empty": torch.empty(0),
    }.items():
        w.add_tensor(f"tensor/{name}", tensor, 0, wall())
    # The calls below take no wall time: both writers use time.time().
    w.add_custom_scalars(
        {
            "Taiwan": {"twse": ["Multiline", ["twse/0050", "twse/2330"]]},
            "USA": {
                "dow": ["Margin", ["dow/aaa", "dow/bbb", "dow/ccc"]],
                "nasdaq": ["Margin", ["nasdaq/aaa", "nasdaq/bbb", "nasdaq/ccc"]],
            },
        }
    )
    w.add_custom_scalars_multilinechart(["loss", "old/double"], category="mine", title="both")
    w.add_custom_scalars_marginchart(["loss", "old/double", "new/float"])
    w.add_graph(Net(), torch.zeros(2, 3))
    features = torch.tensor([[1.0, 2.0, 3.0], [5.0, 4.0, 1.0], [3.0, 7.0, 7.0]])
    w.add_embedding(
        features, metadata=[33, 44, 55], label_img=torch.rand(3, 3, 4, 5, generator=gen)
    )
    rows = [[33, "test"], [44, "train"], [55, "train"]]
    w.add_embedding(features.double(), rows, None, 2, "with/header", ["digit", "dataset"])
    w.add_embedding(
        torch.rand(5, 2, generator=gen), label_img=torch.rand(5, 1, 3, 3, generator=gen)
    )
    w.add_hparams(
        {"lr": 0.1, "bsize": 4, "opt": "sgd", "nesterov": True}, {"hparam/accuracy": 0.75}
    )


def _torch_run(directory: Path, base: float) -> Path:
    with TorchWriter(str(directory)) as w:
        log_everything(w, base)
    return directory


@memo
def memo_run(base: float) -> int:
    with MemoWriter() as w:
        log_everything(w, base)
    return 1


def _memo_run(store_dir: Path, directory: Path, base: float) -> Path:
    memo_run(base)
    evaluation = memo_run.lookup(base)
    assert evaluation is not None
    (run_dir,) = export_tensorboard(Store(store_dir, create=False), [evaluation.id], directory)
    return run_dir


def _pixels(encoded: bytes) -> tuple[str, bytes, tuple[int, ...]]:
    if encoded.startswith(b"GIF"):
        return "GIF", encoded, ()  # both made by moviepy: the same bytes
    image = Image.open(io.BytesIO(encoded))
    return image.mode, np.asarray(image).tobytes(), np.asarray(image).shape


def _read(run_dir: Path) -> dict[str, Any]:
    acc = EventAccumulator(str(run_dir), size_guidance=_ALL)
    acc.Reload()
    tags = acc.Tags()
    out: dict[str, Any] = {
        "scalars": {
            t: [(e.step, e.wall_time, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]
        },
        "images": {
            t: [
                (e.step, e.wall_time, e.width, e.height, _pixels(e.encoded_image_string))
                for e in acc.Images(t)
            ]
            for t in tags["images"]
        },
        "audio": {
            t: [
                (
                    e.step,
                    e.wall_time,
                    e.encoded_audio_string,
                    e.content_type,
                    e.sample_rate,
                    e.length_frames,
                )
                for e in acc.Audio(t)
            ]
            for t in tags["audio"]
        },
        # repr: a NaN statistic equals itself only as text
        "histograms": {
            t: [(e.step, e.wall_time, repr(e.histogram_value)) for e in acc.Histograms(t)]
            for t in tags["histograms"]
        },
        "distributions": {
            t: [
                (e.step, e.wall_time, repr(e.compressed_histogram_values))
                for e in acc.CompressedHistograms(t)
            ]
            for t in tags["distributions"]
        },
        "tensors": {},
        "metadata": {},
        "plugins": {},
    }
    for t in tags["tensors"]:
        if t.startswith("_hparams_/"):
            continue  # hparams: compared by their own test
        # custom scalars layouts carry time.time(): compared without the wall time
        keep_wall = t != "custom_scalars__config__"
        out["tensors"][t] = [
            (e.step, e.wall_time if keep_wall else None, e.tensor_proto) for e in acc.Tensors(t)
        ]
        out["metadata"][t] = acc.SummaryMetadata(t)
    for plugin in ("scalars", "text", "pr_curves", "mesh", "custom_scalars", "tensor"):
        out["plugins"][plugin] = (
            acc.PluginTagToContent(plugin) if plugin in acc._plugin_to_tag_to_content else {}
        )
    out["graph"] = acc.Graph() if tags["graph"] else None
    out["projector"] = _projector(run_dir)
    out["run_metadata"] = acc.RunMetadata("step1") if "step1" in tags["run_metadata"] else None
    return out


def _projector(run_dir: Path) -> dict[str, Any]:
    from google.protobuf import text_format
    from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

    path = run_dir / "projector_config.pbtxt"
    if not path.exists():
        return {}
    config = text_format.Parse(path.read_text(), ProjectorConfig())
    files = {}
    for info in config.embeddings:
        files[info.tensor_path] = (run_dir / info.tensor_path).read_bytes()
        if info.metadata_path:
            files[info.metadata_path] = (run_dir / info.metadata_path).read_bytes()
        if info.sprite.image_path:
            files[info.sprite.image_path] = _pixels((run_dir / info.sprite.image_path).read_bytes())
    return {"config": config, "files": files}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp("parity")
    store_dir = root / "store"
    base = time.time() - 3600.0  # explicit wall times all precede the calls that take none
    mp = pytest.MonkeyPatch()
    mp.setenv("MEMOSTORE_DIR", str(store_dir))
    try:
        theirs = _read(_torch_run(root / "torch", base))
        exported = _memo_run(store_dir, root / "export", base)
    finally:
        mp.undo()
    ours = _read(exported)
    # torch's add_hparams writes a run of its own under the log dir; memostore
    # keeps the hyper-parameters and their metrics in the evaluation's run.
    theirs["hparams_run"] = _hparams(_session_run(root / "torch"))
    ours["hparams_run"] = _hparams(_session_run(exported))
    theirs["main_hparams"] = _hparams_tags(root / "torch")
    ours["main_hparams"] = _hparams_tags(exported)
    return theirs, ours


def _hparams_tags(run_dir: Path) -> list[str]:
    acc = EventAccumulator(str(run_dir), size_guidance=_ALL)
    acc.Reload()
    return (
        sorted(acc.PluginTagToContent("hparams"))
        if "hparams" in acc._plugin_to_tag_to_content
        else []
    )


def _session_run(run_dir: Path) -> Path:
    # add_hparams writes a run of its own below the writer's (torch names it by the time).
    (sub_run,) = [d for d in run_dir.iterdir() if list(d.glob("events.out.*"))]
    return sub_run


def _hparams(run_dir: Path) -> dict[str, Any]:
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(run_dir), size_guidance=_ALL)
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    data = {t: plugin_data_pb2.HParamsPluginData.FromString(c) for t, c in content.items()}
    start = data["_hparams_/session_start_info"].session_start_info
    experiment = data["_hparams_/experiment"].experiment
    return {
        "hparams": {
            k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
            for k, v in start.hparams.items()
        },
        "infos": {i.name: i.type for i in experiment.hparam_infos},
        "metrics": [m.name.tag for m in experiment.metric_infos],
        "metric_values": {
            m.name.tag: [e.value for e in acc.Scalars(m.name.tag)]
            for m in experiment.metric_infos
            if m.name.tag in acc.Tags()["scalars"]
        },
    }


@pytest.mark.parametrize("section", ["scalars", "images", "audio", "histograms", "distributions"])
def test_each_summary_type_matches_torchs_writer(both: Any, section: str) -> None:
    theirs, ours = both
    assert sorted(ours[section]) == sorted(theirs[section])
    for tag, events in theirs[section].items():
        assert ours[section][tag] == events, tag


def test_tensor_summaries_match_torchs_writer(both: Any) -> None:
    theirs, ours = both
    # New-style scalars, text, PR curves, meshes, tensors and custom scalars are tensors.
    assert sorted(ours["tensors"]) == sorted(theirs["tensors"])
    assert {"new/float", "notes/text_summary", "pr", "mesh_VERTEX", "tensor/f16"} <= set(
        theirs["tensors"]
    )
    for tag, events in theirs["tensors"].items():
        assert ours["tensors"][tag] == events, tag
        assert ours["metadata"][tag] == theirs["metadata"][tag], tag
    assert ours["plugins"] == theirs["plugins"]


def test_graph_matches_torchs_writer(both: Any) -> None:
    theirs, ours = both
    assert theirs["graph"] is not None and len(theirs["graph"].node) > 3
    assert ours["graph"] == theirs["graph"]
    assert ours["run_metadata"] == theirs["run_metadata"]


def test_embeddings_are_written_as_torchs_projector_files(both: Any) -> None:
    theirs, ours = both
    assert len(theirs["projector"]["config"].embeddings) == 3
    assert ours["projector"]["config"] == theirs["projector"]["config"]
    assert ours["projector"]["files"] == theirs["projector"]["files"]


def test_hparams_are_a_session_run_as_torchs_writer_writes_it(both: Any) -> None:
    theirs, ours = both
    # torch's writer takes a bool for a number, as memostore's export does there.
    hparams = {"lr": 0.1, "bsize": 4, "opt": "sgd", "nesterov": 1.0}
    assert theirs["hparams_run"]["hparams"] == hparams
    assert theirs["hparams_run"]["metric_values"] == {"hparam/accuracy": [0.75]}
    assert ours["hparams_run"] == theirs["hparams_run"]


def test_the_main_run_is_no_session_beside_add_hparams_sessions(both: Any) -> None:
    theirs, ours = both
    # Each add_hparams call is a session, and nothing else is: as torch writes it.
    assert theirs["main_hparams"] == ours["main_hparams"] == []


@memo
def scored(lr: float, opt: str) -> int:
    with MemoWriter() as w:
        w.add_scalar("loss", lr, 0)
    return 1


def test_an_evaluation_without_add_hparams_is_a_session_of_its_arguments(
    tmp_path: Path, store_dir: Path
) -> None:
    scored(0.5, "sgd")
    evaluation = scored.lookup(0.5, "sgd")
    assert evaluation is not None
    (run_dir,) = export_tensorboard(Store(store_dir, create=False), [evaluation.id], tmp_path)
    session = _hparams(run_dir)
    assert session["hparams"] == {"lr": 0.5, "opt": "sgd"}
    assert session["metrics"] == ["loss"]


# -- methods that need an optional package -----------------------------------------------------
def _figures() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    for i in range(3):
        figure = plt.figure(figsize=(2, 1.5), dpi=40)
        plt.plot([i, i * 2, i * 3])
        figures.append(figure)
    return figures


def _onnx_model(path: Path) -> str:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    node = helper.make_node("Relu", ["x"], ["y"])
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y])), path)
    return str(path)


def log_optional(w: Any, case: str, arg: str) -> None:
    """The calls of one optional-package case."""
    if case == "figure":
        figures = _figures()
        w.add_figure("figure/one", figures[0], 0, close=False, walltime=1.0)
        w.add_figure("figure/list", figures, 1, walltime=2.0)
    elif case == "onnx":
        w.add_onnx_graph(arg)


def _optional_pair(tmp_path: Path, store_dir: Path, case: str, arg: str = "") -> tuple[Any, Any]:
    with TorchWriter(str(tmp_path / "torch")) as w:
        log_optional(w, case, arg)
    # Outside a memoised call: the writer's own run evaluation, recorded at close.
    with MemoWriter(str(tmp_path / "memo")) as w:
        log_optional(w, case, arg)
    store = Store(store_dir, create=False)
    (evaluation_id,) = [e for name, e in store.iter_evaluation_refs() if name.startswith("runs/")]
    (run_dir,) = export_tensorboard(store, [evaluation_id], tmp_path / "export")
    return _read(tmp_path / "torch"), _read(run_dir)


def test_figures_are_images_as_torchs_writer_draws_them(tmp_path: Path, store_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    theirs, ours = _optional_pair(tmp_path, store_dir, "figure")
    assert sorted(theirs["images"]) == ["figure/list", "figure/one"]
    assert ours["images"] == theirs["images"]
    (one,) = ours["images"]["figure/one"]
    assert one[4][0] == "RGB"  # alpha dropped, as torch's writer does


def test_onnx_graph_matches_torchs_writer(tmp_path: Path, store_dir: Path) -> None:
    pytest.importorskip("onnx")
    model = _onnx_model(tmp_path / "model.onnx")
    theirs, ours = _optional_pair(tmp_path, store_dir, "onnx", model)
    assert theirs["graph"] is not None and len(theirs["graph"].node) == 3
    assert ours["graph"] == theirs["graph"]
    assert ours["run_metadata"] is theirs["run_metadata"] is None


def test_onnx_graph_without_onnx_raises_what_torch_raises(tmp_path: Path, store_dir: Path) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("onnx is installed")
    with TorchWriter(str(tmp_path / "torch")) as w, pytest.raises(ImportError) as theirs:
        w.add_onnx_graph("model.onnx")
    with MemoWriter() as w, pytest.raises(ImportError) as ours:
        w.add_onnx_graph("model.onnx")
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


# -- several runs, as TensorBoard's HParams tab shows them --------------------------------------
GRID = [(0.1, 1), (0.1, 2), (0.01, 1), (0.01, 2), (0.3, 4)]


def log_grid_run(w: Any, lr: float, seed: int) -> None:
    """One run of a TensorBoard user's sweep: curves, then add_hparams with its result."""
    for step in range(20):
        w.add_scalar("train/loss", float(np.exp(-lr * step)) + seed * 0.01, step)
        w.add_scalar("val/acc", 1 - float(np.exp(-lr * step)), step)
    w.add_hparams({"lr": lr, "seed": seed}, {"hparam/val_acc": 1 - float(np.exp(-lr * 20))})


def test_a_sweep_exports_the_runs_and_hparams_sessions_torchs_writer_makes(
    tmp_path: Path, store_dir: Path
) -> None:
    import tb_reader

    for lr, seed in GRID:
        with TorchWriter(str(tmp_path / "torch" / "runs" / f"lr{lr}_seed{seed}")) as w:
            log_grid_run(w, lr, seed)
        # Outside any memoised call: each writer is a run evaluation of its own.
        with MemoWriter(str(tmp_path / "memo" / "runs" / f"lr{lr}_seed{seed}")) as w:
            log_grid_run(w, lr, seed)
    store = Store(store_dir, create=False)
    ids = [e for name, e in store.iter_evaluation_refs() if name.startswith("runs/")]
    assert len(ids) == len(GRID)
    exported = tmp_path / "export"
    export_tensorboard(store, ids, exported)

    torch_runs = tmp_path / "torch" / "runs"
    theirs, ours = tb_reader.sessions(torch_runs), tb_reader.sessions(exported)
    # Five sessions, one per add_hparams call, with its metric: the same columns and values.
    assert len(theirs["groups"]) == len(GRID)
    assert theirs["metrics"] == ["hparam/val_acc"]
    assert (
        ours["hparams"]
        == theirs["hparams"]
        == {"lr": "DATA_TYPE_FLOAT64", "seed": "DATA_TYPE_FLOAT64"}
    )
    assert ours["metrics"] == theirs["metrics"]

    def by_run(groups: list[dict[str, Any]]) -> dict[str, Any]:
        # A session's run is <run>/<the time add_hparams was called>: the run names it.
        return {g["name"].rsplit("/", 1)[0]: (g["hparams"], g["metrics"]) for g in groups}

    assert by_run(ours["groups"]) == by_run(theirs["groups"])
    assert set(by_run(theirs["groups"])) == {f"lr{lr}_seed{seed}" for lr, seed in GRID}
    # One run directory per name, laid out as torch's writer lays them out.
    assert sorted(p.name for p in exported.iterdir()) == sorted(
        p.name for p in torch_runs.iterdir()
    )
    theirs_scalars, ours_scalars = tb_reader.scalars(torch_runs), tb_reader.scalars(exported)
    assert {r: v for r, v in ours_scalars.items() if "/" not in r} == {
        r: v for r, v in theirs_scalars.items() if "/" not in r
    }
