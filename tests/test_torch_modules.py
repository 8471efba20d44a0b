"""Modules, optimizers and LR schedulers: structure, identity, binding and caching."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


from codec_helpers import digest, roundtrip  # noqa: E402
from conftest import run_script, write_script  # noqa: E402

from memostore import Store  # noqa: E402
from memostore.values.encoding import Encoder, HashSink  # noqa: E402
from memostore.values.hashcache import digest_cache  # noqa: E402
from memostore.values.summaries import SummaryReader  # noqa: E402
from torch_codecs.modules import ModuleCodec  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def double_output(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
    return output * 2


class TiedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.norm = nn.LayerNorm(8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.alias = self.body  # one submodule registered twice
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight  # tied weights
        self.register_buffer("zeros_a", torch.zeros(4))
        self.register_buffer("zeros_b", torch.zeros(4))
        self.register_buffer("scratch", torch.ones(2), persistent=False)
        self.register_buffer("first_row", self.emb.weight.detach()[0])  # a view
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.norm(self.emb(x)))) * self.scale


class ClippedSGD(torch.optim.SGD):
    """A user optimizer subclass with its own attribute."""

    def __init__(self, params: Any, lr: float, clip: float) -> None:
        super().__init__(params, lr=lr, momentum=0.9)
        self.clip = clip


def train_steps(model: nn.Module, opt: Any, sched: Any = None, steps: int = 3) -> None:
    x = torch.tensor([1, 2, 3])
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if sched is not None:
            sched.step()


def test_module_tree_round_trips_with_identity(store: Store) -> None:
    torch.manual_seed(0)
    model = TiedNet()
    model.body[0].register_forward_hook(double_output)
    model.eval()
    restored, _ = roundtrip(model, store)
    x = torch.tensor([4, 5])
    assert torch.equal(restored(x), model(x))
    assert type(restored) is TiedNet and not restored.training and restored.scale == 0.5
    assert restored.head.weight is restored.emb.weight
    assert restored.alias is restored.body
    assert restored.zeros_a.data_ptr() != restored.zeros_b.data_ptr()
    assert "scratch" not in restored.state_dict() and torch.equal(restored.scratch, torch.ones(2))
    with torch.no_grad():
        restored.emb.weight[0, 0] = 42.0
    assert restored.first_row[0] == 42.0, "a buffer viewing a parameter still views it"
    assert len(restored.body[0]._forward_hooks) == 1
    assert [n for n, _ in restored.named_parameters()] == [n for n, _ in model.named_parameters()]


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Conv2d(3, 4, 3, padding=1),
        lambda: nn.BatchNorm1d(6),
        lambda: nn.LSTM(5, 7, num_layers=2),
        lambda: nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0),
    ],
    ids=["conv", "batchnorm", "lstm", "transformer"],
)
def test_builtin_modules_compute_the_same(make: Any, store: Store) -> None:
    torch.manual_seed(0)
    module = make().eval()
    restored, _ = roundtrip(module, store)
    inputs = {
        nn.Conv2d: torch.randn(1, 3, 5, 5),
        nn.BatchNorm1d: torch.randn(4, 6),
        nn.LSTM: torch.randn(3, 2, 5),
        nn.TransformerEncoderLayer: torch.randn(2, 3, 16),
    }[type(module)]
    expected, got = module(inputs), restored(inputs)
    if isinstance(expected, tuple):
        expected, got = expected[0], got[0]
    assert torch.equal(expected, got)


def test_module_digest_is_canonical_and_cached(store: Store) -> None:
    torch.manual_seed(0)
    model = TiedNet()
    torch.manual_seed(0)
    assert digest(model) == digest(TiedNet()), "equal models, separately built"
    other = copy.deepcopy(model)
    other.first_row = other.emb.weight.detach()[0]  # deepcopy does not keep this view
    other.scale = 0.25
    assert digest(other) != digest(model)
    with torch.no_grad():
        other.scale = 0.5
        other.body[0].bias.add_(1)
    assert digest(other) != digest(model)

    restored, doc_id = roundtrip(model, store)
    fingerprint = ModuleCodec().fingerprint(restored)
    assert fingerprint is not None
    digest_cache.put(restored, fingerprint, doc_id)  # what @memo does on a hit
    assert Encoder(HashSink()).encode_value(restored) == doc_id
    with torch.no_grad():
        restored.norm.weight.mul_(2)
    assert Encoder(HashSink()).encode_value(restored) == digest(restored) != doc_id


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.Adam(ps, lr=1e-2),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
        lambda ps: torch.optim.RMSprop(ps, lr=1e-2),
        lambda ps: ClippedSGD(ps, lr=0.1, clip=1.0),
    ],
    ids=["sgd", "adam", "adamw", "rmsprop", "subclass"],
)
def test_optimizer_binds_to_the_restored_model(make_opt: Any, store: Store) -> None:
    torch.manual_seed(0)
    model = TiedNet()
    opt = make_opt(model.parameters())
    train_steps(model, opt)
    (model2, opt2), _ = roundtrip((model, opt), store)
    params = list(model2.parameters())
    assert all(a is b for a, b in zip(opt2.param_groups[0]["params"], params, strict=True))
    for p, q in zip(model.parameters(), params, strict=True):
        for key, value in opt.state[p].items():
            other = opt2.state[q][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other
    if isinstance(opt, ClippedSGD):
        assert type(opt2) is ClippedSGD and opt2.clip == 1.0
    # One more step on each: the restored pair follows the original exactly.
    train_steps(model, opt, steps=1)
    train_steps(model2, opt2, steps=1)
    for p, q in zip(model.parameters(), params, strict=True):
        assert torch.equal(p, q)


def test_optimizer_before_its_model_and_alone(store: Store) -> None:
    model = TiedNet()
    opt = torch.optim.Adam(model.parameters())
    train_steps(model, opt, steps=1)
    (opt2, model2), _ = roundtrip((opt, model), store)
    assert all(
        a is b for a, b in zip(opt2.param_groups[0]["params"], model2.parameters(), strict=True)
    )
    assert set(map(id, opt2.state)) == set(map(id, model2.parameters()))
    alone, _ = roundtrip(opt, store)
    assert all(type(p) is nn.Parameter for p in alone.param_groups[0]["params"])


def test_two_models_two_optimizers_bind_to_their_own_model(store: Store) -> None:
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), nn.Sequential(nn.LayerNorm(4))
    opt_g = torch.optim.Adam(gen.parameters())
    opt_d = torch.optim.Adam(disc.parameters())  # LayerNorm params equal to gen's
    (gen2, disc2, opt_g2, opt_d2), _ = roundtrip((gen, disc, opt_g, opt_d), store)
    assert [id(p) for p in opt_g2.param_groups[0]["params"]] == [id(p) for p in gen2.parameters()]
    assert [id(p) for p in opt_d2.param_groups[0]["params"]] == [id(p) for p in disc2.parameters()]


def lr_lambda(epoch: int) -> float:
    return 0.9**epoch


SCHEDULERS = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, 2, gamma=0.5),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (e + 1)),
    "lambda_fn": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lr_lambda),
    "multistep": lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 4]),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10),
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=20),
    "cyclic": lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=3),
    "sequential": lambda o: torch.optim.lr_scheduler.SequentialLR(
        o,
        [
            torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=2),
            torch.optim.lr_scheduler.ExponentialLR(o, 0.9),
        ],
        milestones=[2],
    ),
    "chained": lambda o: torch.optim.lr_scheduler.ChainedScheduler(
        [
            torch.optim.lr_scheduler.ConstantLR(o, 0.5),
            torch.optim.lr_scheduler.ExponentialLR(o, 0.9),
        ]
    ),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_state_is_restored_and_bound(name: str, store: Store) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = SCHEDULERS[name](opt)
    x = torch.randn(4, 3)

    def step(m: nn.Module, o: Any, s: Any) -> None:
        o.zero_grad()
        m(x).sum().backward()
        o.step()
        s.step()

    for _ in range(3):
        step(model, opt, sched)
    (model2, opt2, sched2), _ = roundtrip((model, opt, sched), store)
    assert sched2.optimizer is opt2
    for sub in getattr(sched2, "_schedulers", []):
        assert sub.optimizer is opt2
    with _no_warnings():
        for _ in range(3):
            step(model, opt, sched)
            step(model2, opt2, sched2)
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert torch.equal(model2.weight, model.weight)


def test_reduce_on_plateau(store: Store) -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
    for loss in (1.0, 1.0, 1.0):
        sched.step(loss)
    (opt2, sched2), _ = roundtrip((opt, sched), store)
    assert sched2.optimizer is opt2 and sched2.num_bad_epochs == sched.num_bad_epochs
    for loss in (1.0, 1.0):
        sched.step(loss)
        sched2.step(loss)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] < 1.0


class _no_warnings:
    """Fail on any warning (e.g. torch's 'optimizer.step() has been overridden')."""

    def __enter__(self) -> None:
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


def test_summaries_name_tensors_classes_and_hyper_parameters(store: Store) -> None:
    model = TiedNet()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, 5)
    _, doc_id = roundtrip((model, opt, sched), store)
    summary = SummaryReader(store.objects).summarize_doc(doc_id)
    module, optim, lr_sched = summary["items"]
    assert module["type"] == "torch.module" and module["class"].endswith("TiedNet")
    assert module["tensors"]["emb.weight"] == {
        "type": "parameter",
        "shape": [10, 8],
        "dtype": "float32",
        "bytes": 320,
        "device": "cpu",
        "requires_grad": True,
    }
    assert module["tensors"]["head.weight"] == {"type": "tied"}
    assert optim["class"] == "torch.optim.adamw.AdamW"
    assert optim["param_groups"][0]["lr"] == 3e-4
    assert lr_sched["class"] == "torch.optim.lr_scheduler.StepLR"


TRAIN_SCRIPT = """
import sys
import torch
import torch.nn as nn
from memostore import memo


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 2)
        self.register_buffer("zero_a", torch.zeros(3))
        self.register_buffer("zero_b", torch.zeros(3))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@memo
def train(steps: int, lr: float):
    with open("runs.txt", "a") as f:
        f.write("run\\n")
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    x, y = torch.randn(32, 4), torch.randn(32, 2)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        sched.step()
    return model, opt, sched


model, opt, sched = train(5, 1e-2)
params = list(model.parameters())
print("out", model(torch.ones(3, 4)).detach().numpy().tobytes().hex())
print("state", [opt.state[p]["exp_avg"].numpy().tobytes().hex() for p in params])
print("bound", all(a is b for a, b in zip(opt.param_groups[0]["params"], params)))
print("sched", sched.optimizer is opt, sched.last_epoch)
print("buffers", model.zero_a.data_ptr() != model.zero_b.data_ptr())
before = [p.detach().clone() for p in params]
opt.zero_grad()
model(torch.ones(3, 4)).sum().backward()
opt.step()
sched.step()
print("trains", all(not torch.equal(a, b) for a, b in zip(before, model.parameters())))
"""


@pytest.mark.slow
def test_train_result_hits_across_processes(tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", TRAIN_SCRIPT)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    first = run_script(script, env=env).stdout.splitlines()
    second = run_script(script, env=env).stdout.splitlines()
    assert (tmp_path / "runs.txt").read_text() == "run\n", "the second process must hit"
    assert first[:2] == second[:2], "outputs and optimizer state are bit-identical"
    assert second[2:] == ["bound True", "sched True 5", "buffers True", "trains True"]
