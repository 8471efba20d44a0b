"""A hit leaves every argument the body mutated as the miss left it: generated programs.

A program is a short sequence of mutations a training step makes to its
arguments (assignments, attributes, ``add_param_group``, ``.grad``,
``requires_grad_``, ``register_buffer``, hooks added and removed). Each runs
through a memoised function on fresh objects twice, in one process: the miss
runs it, the hit replays its post-call state. The caller-visible state of both
must be the same (:func:`state_of`). Seeded as ``test_roundtrip_properties.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from torch import nn

from memostore import memo

SEED = int(os.environ["MEMOSTORE_PROPERTY_SEED"])
OPS = (
    "assign",
    "setattr",
    "add_param_group",
    "grad",
    "requires_grad",
    "register_buffer",
    "add_hook",
    "remove_hook",
    "step",
)


def scale_output(module: nn.Module, inputs: Any, output: Any) -> Any:
    return output * 2


def fresh() -> tuple[nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    for p in model[0].parameters():
        p.requires_grad_(False)
    return model, torch.optim.Adam(model[1].parameters(), lr=0.1)


@memo
def run(model: nn.Sequential, opt: torch.optim.Optimizer, program: tuple[str, ...]) -> None:
    x = torch.ones(4, 3)
    for i, op in enumerate(program):
        if op == "assign":
            with torch.no_grad():
                model[1].weight.mul_(0.5)
        elif op == "setattr":
            model[1].note = i
        elif op == "add_param_group" and len(opt.param_groups) == 1:
            for p in model[0].parameters():
                p.requires_grad_(True)
            opt.add_param_group({"params": list(model[0].parameters()), "lr": 0.01})
        elif op == "grad":
            model(x).sum().backward()
        elif op == "requires_grad":
            model[1].bias.requires_grad_(not model[1].bias.requires_grad)
        elif op == "register_buffer":
            model[1].register_buffer(f"b{i}", torch.full((2,), float(i)))
        elif op == "add_hook":
            model[1].register_forward_hook(scale_output)
        elif op == "remove_hook":
            model[1]._forward_hooks.clear()
        elif op == "step":
            opt.step()


def state_of(model: nn.Module, opt: torch.optim.Optimizer) -> Any:
    """Everything the caller can see of the pair, with parameters named by position."""
    params = list(model.parameters())
    where = {id(p): i for i, p in enumerate(params)}

    def tensor(t: Any) -> Any:
        return None if t is None else (t.dtype, tuple(t.shape), t.detach().tolist())

    def flat(v: Any) -> Any:
        return tensor(v) if torch.is_tensor(v) else v

    return {
        "params": [(tensor(p), p.requires_grad, tensor(p.grad)) for p in params],
        "buffers": [(n, tensor(b)) for n, b in model.named_buffers()],
        "attrs": {n: vars(m).get("note") for n, m in model.named_modules()},
        "hooks": [
            [(type(h).__name__, getattr(h, "__name__", "")) for h in m._forward_hooks.values()]
            for m in model.modules()
        ],
        "groups": [
            ({k: v for k, v in g.items() if k != "params"}, [where[id(p)] for p in g["params"]])
            for g in opt.param_groups
        ],
        "state": [
            (where[id(p)], sorted((k, flat(v)) for k, v in s.items())) for p, s in opt.state.items()
        ],
        "output": tensor(model(torch.ones(1, 3))),
    }


@pytest.fixture(autouse=True, scope="module")
def _store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    old = os.environ.get("MEMOSTORE_DIR")
    os.environ["MEMOSTORE_DIR"] = str(tmp_path_factory.mktemp("mutations") / "store")
    yield
    if old is None:
        del os.environ["MEMOSTORE_DIR"]
    else:
        os.environ["MEMOSTORE_DIR"] = old


@pytest.mark.filterwarnings("error::memostore.MemostoreWarning")
@seed(SEED)
@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=6).map(tuple))
def test_a_hit_leaves_the_arguments_as_the_miss_did(program: tuple[str, ...]) -> None:
    model, opt = fresh()
    if run.lookup(model, opt, program) is None:
        run(model, opt, program)
        expected = state_of(model, opt)
        model, opt = fresh()
    else:
        plain, plain_opt = fresh()
        run.__wrapped__(plain, plain_opt, program)
        expected = state_of(plain, plain_opt)
    assert run.lookup(model, opt, program) is not None
    run(model, opt, program)  # a hit
    assert state_of(model, opt) == expected


def test_the_state_compared_sees_grads_groups_and_hooks(tmp_path: Path) -> None:
    """Each kind of mutation changes what :func:`state_of` sees."""
    base = state_of(*fresh())
    for op in OPS:
        if op in ("remove_hook", "step"):
            continue
        model, opt = fresh()
        run.__wrapped__(model, opt, (op,))
        assert state_of(model, opt) != base, op
