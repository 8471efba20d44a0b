"""How the writer's media methods store their points: blobs, kinds, errors, summaries.

Graphs, embeddings, PR curves, audio, video, meshes, custom-scalar layouts,
tensors, images with boxes and new-style scalars, through the public
``SummaryWriter``; what TensorBoard sees of them once exported is
``test_tb_export_parity.py``'s subject.
"""

from __future__ import annotations

import contextvars
import json
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from memostore_cli.main import cli

from memostore import MemostoreWarning, Store, memo
from memostore import SummaryWriter as MemoWriter
from memostore.metrics import load_events, metrics_summary
from memostore.metrics.read import load_manifest
from memostore.metrics.recover import journal_roots

torch = pytest.importorskip("torch")

CLIP = np.sin(np.arange(2205) / 10.0)


def log_one_of_each(w: Any) -> None:
    """One point of every media kind (two of the same audio clip)."""
    gen = torch.Generator().manual_seed(0)
    w.add_audio("sound", CLIP, 0, sample_rate=22050)
    w.add_audio("sound", CLIP, 1, sample_rate=22050)
    w.add_pr_curve("pr", np.array([0, 1, 1, 0]), np.array([0.1, 0.9, 0.6, 0.4]), 0, 10)
    vertices = torch.rand(1, 4, 3, generator=gen)
    faces = torch.tensor([[[0, 1, 2], [1, 2, 3]]])
    w.add_mesh("mesh", vertices, faces=faces, config_dict={"camera": {"fov": 75}})
    w.add_tensor("tensor", torch.arange(6, dtype=torch.float16).reshape(2, 3), 0)
    w.add_custom_scalars_marginchart(["a", "b", "c"])
    image = torch.rand(3, 16, 16, generator=gen)
    w.add_image_with_boxes("boxes", image, torch.tensor([[1, 1, 10, 10]]), 0, labels=["x"])
    w.add_embedding(torch.rand(4, 3, generator=gen), list("abcd"), torch.rand(4, 3, 2, 2))
    w.add_scalar("loss", 0.5, 0, new_style=True)
    w.add_scalar("loss", 0.25, 1, new_style=True)
    w.add_scalar("plain", 1.0, 0)


@memo
def logged(n: int) -> int:
    with MemoWriter() as w:
        log_one_of_each(w)
    return n


@memo
def logged_again(n: int) -> int:
    with MemoWriter() as w:
        w.add_audio("clip", CLIP, 0, sample_rate=22050)
    return n


def _logs(fn: Any, *args: Any) -> tuple[Store, str]:
    fn(*args)
    evaluation = fn.lookup(*args)
    assert evaluation is not None and evaluation.logs_id
    return Store.default(), evaluation.logs_id


def test_each_kind_is_its_own_tag(store_dir: Path) -> None:
    store, logs_id = _logs(logged, 1)
    kinds = {tag: s["kind"] for tag, s in metrics_summary(store, logs_id).items()}
    assert kinds == {
        "sound": "audio",
        "pr": "pr_curve",
        "mesh": "mesh",
        "tensor": "tensor",
        "custom_scalars__config__": "custom_scalars",
        "boxes": "image",
        "default": "embedding",
        "loss": "scalar",
        "plain": "scalar",
    }
    assert metrics_summary(store, logs_id)["sound"]["count"] == 2


def test_payloads_are_blobs_stored_once_and_linked(store_dir: Path) -> None:
    store, logs_id = _logs(logged, 1)
    first, second = load_events(store, logs_id, "sound")
    assert first["blob"] == second["blob"]  # the same clip twice: one blob
    wav = store.objects.get_bytes(first["blob"])
    assert wav.startswith(b"RIFF") and wav[8:12] == b"WAVE"
    assert (first["sample_rate"], first["channels"], first["frames"]) == (22050.0, 1, 2205)
    # Another evaluation logging the same clip shares it.
    _, other = _logs(logged_again, 1)
    (again,) = load_events(store, other, "clip")
    assert again["blob"] == first["blob"]

    links = store.objects.get_doc(logs_id).links.blobs
    (mesh,) = load_events(store, logs_id, "mesh")
    (embedding,) = load_events(store, logs_id, "default")
    (boxes,) = load_events(store, logs_id, "boxes")
    (tensor,) = load_events(store, logs_id, "tensor")
    payloads = {first["blob"], boxes["blob"], tensor["blob"], embedding["blob"]}
    payloads |= {embedding["metadata"], embedding["sprite"]} | {p[1] for p in mesh["parts"]}
    assert payloads <= set(links)  # gc, push and pull follow them


def test_points_read_back_with_their_fields(store_dir: Path) -> None:
    store, logs_id = _logs(logged, 1)
    (pr,) = load_events(store, logs_id, "pr")
    assert pr["thresholds"] == 10 and pr["data"].shape == (6, 10)
    assert pr["data"][0, 0] == 2.0  # true positives at the lowest threshold
    (mesh,) = load_events(store, logs_id, "mesh")
    assert [(p[0], p[2]) for p in mesh["parts"]] == [("VERTEX", [1, 4, 3]), ("FACE", [1, 2, 3])]
    assert mesh["components"] == (1 << 1) | (1 << 2)
    assert json.loads(mesh["config"]) == {"camera": {"fov": 75}}
    faces = np.frombuffer(store.objects.get_bytes(mesh["parts"][1][1]), "<f4")
    assert faces.tolist() == [0.0, 1.0, 2.0, 1.0, 2.0, 3.0]
    (tensor,) = load_events(store, logs_id, "tensor")
    assert (tensor["dtype"], tensor["field"], tensor["shape"]) == ("DT_HALF", "half_val", [2, 3])
    # torch's writer keeps a half tensor's values as float32 bit patterns.
    bits = np.frombuffer(store.objects.get_bytes(tensor["blob"]), tensor["layout"])
    assert bits.view("<f4").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    (layout,) = load_events(store, logs_id, "custom_scalars__config__")
    assert layout["layout"] == [["default", [["untitled", "Margin", ["a", "b", "c"]]]]]
    (embedding,) = load_events(store, logs_id, "default")
    assert (embedding["shape"], embedding["sprite_dim"]) == ([4, 3], [2, 2])
    assert store.objects.get_bytes(embedding["metadata"]) == b"a\nb\nc\nd\n"
    (boxes,) = load_events(store, logs_id, "boxes")
    assert (boxes["height"], boxes["width"], boxes["channels"]) == (16, 16, 3)
    manifest = load_manifest(store, logs_id)["tags"]
    assert manifest["loss"]["style"] == "float" and "style" not in manifest["plain"]


def test_show_counts_each_kind_without_reading_a_payload(store_dir: Path) -> None:
    store, logs_id = _logs(logged, 1)
    # Remove every chunk and payload: show reads the manifest alone.
    for blob in store.objects.get_doc(logs_id).links.blobs:
        store.objects.delete(blob)
    result = CliRunner().invoke(cli, ["--store", str(store_dir), "show", "logged", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)["metrics"]
    assert {t: (m["kind"], m["count"]) for t, m in metrics.items()} == {
        "sound": ("audio", 2),
        "pr": ("pr_curve", 1),
        "mesh": ("mesh", 1),
        "tensor": ("tensor", 1),
        "custom_scalars__config__": ("custom_scalars", 1),
        "boxes": ("image", 1),
        "default": ("embedding", 1),
        "loss": ("scalar", 2),
        "plain": ("scalar", 1),
    }


@memo
def running_roots(n: int) -> bool:
    with MemoWriter() as w:
        w.add_audio("sound", CLIP * 0.25, 0)
        w.add_mesh("mesh", np.zeros((1, 3, 3)) + n)
        w.flush()
        roots = journal_roots(Store.default())
    # Every payload logged so far is a gc root while the call runs.
    return len(roots) >= 2


def test_payloads_of_a_running_evaluation_are_gc_roots(store_dir: Path) -> None:
    assert running_roots(3) is True
    store = Store.default()
    evaluation = running_roots.lookup(3)
    assert evaluation is not None
    (mesh,) = load_events(store, evaluation.logs_id, "mesh")
    (sound,) = load_events(store, evaluation.logs_id, "sound")
    assert journal_roots(store) == set()  # sealed: the record links them now
    assert {sound["blob"], mesh["parts"][0][1]} <= set(
        store.objects.get_doc(evaluation.logs_id).links.blobs
    )


def test_a_point_after_its_evaluation_ended_is_dropped_with_a_warning(store_dir: Path) -> None:
    later: list[Any] = []

    @memo
    def leaks(n: int) -> int:
        writer = MemoWriter()
        later.append((contextvars.copy_context(), writer))
        return n

    leaks(1)
    ctx, writer = later[0]
    errors: list[BaseException] = []

    def log_late() -> None:
        try:
            writer.add_audio("late", CLIP, 0)
        except BaseException as exc:  # the test fails on any exception
            errors.append(exc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=ctx.run, args=(log_late,))
        thread.start()
        thread.join()
    assert errors == []
    assert any(
        issubclass(w.category, MemostoreWarning) and "add_audio" in str(w.message) for w in caught
    )


# -- input torch's writer refuses --------------------------------------------------------------
class Linear3(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 5)

    def forward(self, x: Any) -> Any:
        return {"out": self.fc(x)}


def _tall_images() -> Any:
    return torch.zeros(2, 3, 6, 2)  # taller than wide: torch's sprite cannot hold them


REFUSED = {
    "scalar of a string": lambda w: w.add_scalar("s", "not a number", 1),
    "scalar of three elements": lambda w: w.add_scalar("s", np.ones(3), 2),
    "empty histogram": lambda w: w.add_histogram("h", np.array([]), 0),
    "image of the wrong dataformats": lambda w: w.add_image("i", np.zeros((2, 2)), 0),
    "audio of two channels": lambda w: w.add_audio("a", np.zeros((2, 100))),
    "audio as a list": lambda w: w.add_audio("a", [0.0, 0.5, 0.1]),
    "video of four axes": lambda w: w.add_video("v", np.zeros((2, 3, 8, 8))),
    "mesh of two axes": lambda w: w.add_mesh("m", np.zeros((4, 3))),
    "tensor as an array": lambda w: w.add_tensor("t", np.zeros(3)),
    "tensor of uint16": lambda w: w.add_tensor("t", torch.zeros(3, dtype=torch.uint16)),
    "margin chart of two": lambda w: w.add_custom_scalars_marginchart(["a", "b"]),
    "margin layout of two": lambda w: w.add_custom_scalars({"c": {"t": ["Margin", ["a", "b"]]}}),
    "labels for other points": lambda w: w.add_embedding(torch.zeros(3, 2), metadata=["a"]),
    "images for other points": lambda w: w.add_embedding(
        torch.zeros(3, 2), label_img=_tall_images()
    ),
    "tall sprite images": lambda w: w.add_embedding(torch.zeros(2, 2), label_img=_tall_images()),
    "embedding of three axes": lambda w: w.add_embedding(torch.zeros(3, 2, 2)),
    "graph of a wrong input": lambda w: w.add_graph(torch.nn.Linear(3, 5), torch.rand(1, 9)),
    "strict graph of a dict": lambda w: w.add_graph(Linear3(), torch.zeros(1, 3)),
    "embedding of one axis": lambda w: w.add_embedding(torch.zeros(0)),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_input_torchs_writer_refuses_raises_the_same(
    case: str, store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    call = REFUSED[case]
    with TorchWriter(str(tmp_path / "torch")) as w, pytest.raises(Exception) as theirs:
        call(w)
    with MemoWriter(str(tmp_path / "memo")) as w:
        with pytest.raises(Exception) as ours:
            call(w)
        w.add_scalar("after", 1.0, 0)
    assert type(ours.value) is type(theirs.value), (ours.value, theirs.value)
    # The refused call stored nothing; the writer goes on.
    store = Store.default()
    (run,) = [e for name, e in store.iter_evaluation_refs() if name.startswith("runs/")]
    from memostore.records.evaluation import Evaluation

    assert list(metrics_summary(store, Evaluation.load(store, run).logs_id)) == ["after"]
