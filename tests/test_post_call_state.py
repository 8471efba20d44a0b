"""Post-call state: everything the body changed that the caller can see, across processes.

A fine-tuning step unfreezes a backbone (``requires_grad_``), adds a parameter
group, backpropagates and steps Adam; epochs then accumulate gradients over a
batch count that is not a multiple of the steps, under a ``LambdaLR`` over a
lambda. A run killed after two epochs and resumed for three must end as the
plain script does: weights, leftover ``.grad``, Adam state of every group,
learning rates; and the resumed run hits every stored epoch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_script, write_script

SCRIPT = r"""
import hashlib, json, sys
import torch
from torch import nn
from memostore import memo

torch.manual_seed(0)
backbone = nn.Linear(4, 4)
head = nn.Linear(4, 2)
model = nn.Sequential(backbone, head)
for p in backbone.parameters():
    p.requires_grad_(False)
opt = torch.optim.Adam(head.parameters(), lr=0.1)
x = torch.randn(10, 4)


@memo
def unfreeze(model, opt, x):
    for p in model[0].parameters():
        p.requires_grad_(True)
    opt.add_param_group({"params": list(model[0].parameters()), "lr": 0.01})
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


@memo
def epoch(model, opt, sched, x, accumulate=3):
    # 5 batches, a step every 3: the gradients of the last 2 carry into the next epoch.
    for i, batch in enumerate(x.split(2)):
        model(batch).pow(2).mean().backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()
    sched.step()
    return float(model(x).pow(2).mean())


def state():
    weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    grads = b"".join(p.grad.numpy().tobytes() for p in model.parameters() if p.grad is not None)
    return {
        "weights": hashlib.sha256(weights).hexdigest()[:16],
        "grads": hashlib.sha256(grads).hexdigest()[:16],
        "sizes": [len(opt.state[p]) for g in opt.param_groups for p in g["params"]],
        "lr": [g["lr"] for g in opt.param_groups],
    }


unfreeze(model, opt, x)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5 ** epoch)
out = {"after_unfreeze": state(), "losses": []}
for _ in range(int(sys.argv[1])):
    out["losses"].append(epoch(model, opt, sched, x))
opt.step()  # the caller's next step uses the gradients left over
out["end"] = state()
print(json.dumps(out))
"""
REPRODUCIBLE = {"MKL_CBWR": "COMPATIBLE", "PYTHONWARNINGS": "ignore"}


def test_a_resumed_fine_tuning_run_ends_as_the_plain_script(tmp_path: Path) -> None:
    plain = write_script(
        tmp_path, "plain.py", SCRIPT.replace("from memostore import memo\n", "memo = lambda f: f\n")
    )
    memoised = write_script(tmp_path, "finetune.py", SCRIPT)
    expected = json.loads(run_script(plain, "3", env=REPRODUCIBLE).stdout)
    env = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(tmp_path / "store"), "MEMOSTORE_VERBOSE": "1"}
    killed = run_script(memoised, "2", env=env)
    assert killed.stderr.count("epoch: miss") == 2
    resumed = run_script(memoised, "3", env=env)
    calls = re.findall(r"^memostore: (\w+): (hit|miss)", resumed.stderr, re.M)
    # Each stored call hits, the scheduler's lambda restored included: then the third runs.
    assert calls == [("unfreeze", "hit"), ("epoch", "hit"), ("epoch", "hit"), ("epoch", "miss")]
    got = json.loads(resumed.stdout)
    assert got["after_unfreeze"]["sizes"] == [3, 3, 3, 3], "the added group's Adam state"
    assert got == expected


LOADER_SCRIPT = r"""
import functools, json
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataloader import default_collate
from memostore import memo


def collate(batch, scale=1.0):
    (x,) = default_collate(batch)
    return x * scale


class Strict:
    def __init__(self):
        self.n = 0

    def __setstate__(self, state):
        if "n" in self.__dict__:
            raise ValueError("its state is set once")  # a live object refuses it
        self.__dict__.update(state)


@memo
def epoch_loss(loader):
    loader.collate_fn.keywords["scale"] = 2.0  # a partial changed in place
    loader.batch_sampler.batch_size = 3
    return sum(float(b.sum()) for b in loader)


@memo
def step(history, strict):
    history.append(len(history))  # changed first, by a miss...
    strict.n = 2  # ...then a state that a hit cannot put back


loader = DataLoader(TensorDataset(torch.arange(12.0)), batch_size=4,
                    collate_fn=functools.partial(collate, scale=1.0))
history, strict = [7], Strict()
out = {"loss": epoch_loss(loader), "batches": [float(b.sum()) for b in loader]}
out["scale"] = loader.collate_fn.keywords
step(history, strict)
out.update(history=history, n=strict.n)
print(json.dumps(out))
"""


def test_a_hit_that_cannot_put_state_back_refuses_before_changing_anything(
    tmp_path: Path,
) -> None:
    """A partial changed in place made the hit raise half-way ("invalid partial state")."""
    plain = write_script(
        tmp_path,
        "plain.py",
        LOADER_SCRIPT.replace("from memostore import memo\n", "memo = lambda f: f\n"),
    )
    memoised = write_script(tmp_path, "loader.py", LOADER_SCRIPT)
    expected = json.loads(run_script(plain, env=REPRODUCIBLE).stdout)
    env = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(tmp_path / "store"), "MEMOSTORE_VERBOSE": "1"}
    env["PYTHONWARNINGS"] = "ignore::UserWarning"  # memostore's own warnings are shown
    first = run_script(memoised, env=env)
    # Checked as a hit would replay it, when stored: said at once, nothing kept.
    assert "does not take its stored state back" in first.stderr
    second = run_script(memoised, env=env)
    calls = re.findall(r"^memostore: (\w+): (hit|miss)", second.stderr, re.M)
    assert calls == [("epoch_loss", "hit"), ("step", "miss")], second.stderr
    assert json.loads(second.stdout) == expected


CHAIN_SCRIPT = r"""
import json, sys
import torch
from torch import nn
from memostore import memo


class MySGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
                    self.state[p]["steps"] = self.state[p].get("steps", 0) + 1


torch.manual_seed(0)
x, y = torch.randn(16, 3), torch.randn(16, 1)
sub = nn.Linear(3, 1)
sub_opt = MySGD(sub.parameters())
lbfgs = nn.Linear(3, 1)
lbfgs_opt = torch.optim.LBFGS(lbfgs.parameters(), lr=0.5, max_iter=3)


@memo
def epoch(model, opt, x, y):
    def closure():
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        return loss

    if isinstance(opt, torch.optim.LBFGS):
        return float(opt.step(closure))
    loss = closure()
    opt.step()
    return float(loss)


losses = []
for _ in range(int(sys.argv[1])):
    losses.append([epoch(sub, sub_opt, x, y), epoch(lbfgs, lbfgs_opt, x, y)])
print(json.dumps(losses))
"""


def test_chained_epochs_hit_across_processes_with_a_user_optimizer_and_lbfgs(
    tmp_path: Path,
) -> None:
    """After a hit, the next epoch missed: torch's __setstate__ added defaults it lacked."""
    plain = write_script(
        tmp_path,
        "plain.py",
        CHAIN_SCRIPT.replace("from memostore import memo\n", "memo = lambda f: f\n"),
    )
    memoised = write_script(tmp_path, "chain.py", CHAIN_SCRIPT)
    expected = json.loads(run_script(plain, "3", env=REPRODUCIBLE).stdout)
    env = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(tmp_path / "store"), "MEMOSTORE_VERBOSE": "1"}
    run_script(memoised, "2", env=env)
    resumed = run_script(memoised, "3", env=env)
    kinds = re.findall(r"^memostore: epoch: (hit|miss)", resumed.stderr, re.M)
    assert kinds == ["hit"] * 4 + ["miss"] * 2, resumed.stderr
    assert json.loads(resumed.stdout) == expected
