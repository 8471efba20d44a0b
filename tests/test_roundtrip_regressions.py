"""Values a hit once restored other than the miss returned them, each by name.

The generated round trips (``test_roundtrip_properties.py``) and reports from
real code found these; each stays a test of its own through the public
surface, across processes where the difference was.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
from conftest import run_script, write_script

from memostore import memo

ORDER_SCRIPT = """
import collections, dataclasses, json, sys
import torch
from torch import nn
from memostore import memo

@dataclasses.dataclass
class Run:
    zeta: int
    alpha: int

@memo
def mk(n):
    run = Run(1, 2)
    run.extra = 3  # attribute order: zeta, alpha, extra
    by_layer = collections.defaultdict(list)
    for i in reversed(range(n)):
        by_layer[f"block{i}"].append(i)
    return {
        "weights": {f"layers.{i}.weight": torch.full((2,), float(i)) for i in range(n)},
        "plain": {f"k{i}": i for i in range(n)},
        "state": nn.Sequential(*[nn.Linear(2, 2) for _ in range(n)]).state_dict(),
        "by_layer": by_layer,
        "attrs": list(vars(run)),
        "nested": {"z": {"b": 1, "a": 2}, "a": [{"y": 1, "x": 2}]},
    }

@memo
def grow(table):
    for name in ("zz", "aa", "mm"):
        table[name] = len(name)

out = mk(12)
table = {"b": 0}
grow(table)
shape = {
    name: list(value) if isinstance(value, dict) else value for name, value in out.items()
}
shape["by_layer_type"] = [type(out["by_layer"]).__name__, out["by_layer"].default_factory.__name__]
shape["nested"] = [list(out["nested"]), list(out["nested"]["z"]), list(out["nested"]["a"][0])]
shape["table"] = list(table)
shape["order"] = list(out)
print(json.dumps(shape))
"""


def test_a_hit_keeps_the_order_of_dicts_state_dicts_and_attributes(tmp_path: Path) -> None:
    """A hit gave layers.0, layers.1, layers.10, ...: the canonical (sorted) order."""
    script = write_script(tmp_path, "order.py", ORDER_SCRIPT)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store"), "MEMOSTORE_VERBOSE": "1"}
    miss = run_script(script, env=env)
    hit = run_script(script, env=env)
    assert "mk: miss" in miss.stderr and "mk: hit" in hit.stderr
    assert "grow: hit" in hit.stderr
    expected = json.loads(miss.stdout)
    assert expected["weights"][:3] == ["layers.0.weight", "layers.1.weight", "layers.2.weight"]
    assert expected["by_layer"][0] == "block11" and expected["attrs"] == ["zeta", "alpha", "extra"]
    assert expected["table"] == ["b", "zz", "aa", "mm"]
    assert json.loads(hit.stdout) == expected


@memo
def _keyed(table: dict[str, int]) -> int:
    return len(table)


def test_keys_and_digests_stay_insensitive_to_insertion_order(store_dir: Path) -> None:
    """The order is kept beside the canonical encoding, never in a key."""
    forward = {f"k{i}": i for i in range(12)}
    backward = dict(reversed(list(forward.items())))
    assert _keyed.key(forward) == _keyed.key(backward)
    # An OrderedDict is keyed by its order, as == compares it.
    assert _keyed.key(OrderedDict(forward)) != _keyed.key(OrderedDict(backward))


@memo
def _forward(n: int) -> dict[str, int]:
    return {f"k{i}": i for i in range(n)}


@memo
def _backward(n: int) -> dict[str, int]:
    return {f"k{i}": i for i in reversed(range(n))}


@memo
def _copy_of(value: Any) -> Any:
    return {**value}


def test_one_document_stored_in_two_orders_restores_each_in_its_own(store_dir: Path) -> None:
    """Two evaluations hold one canonical document: each keeps the order it returned."""
    assert list(_forward(3)) == ["k0", "k1", "k2"] and list(_backward(3)) == ["k2", "k1", "k0"]
    first, second = _forward.lookup(3), _backward.lookup(3)
    assert first.result_id == second.result_id, "one canonical document, one digest"
    assert list(first.load_result()) == ["k0", "k1", "k2"]
    assert list(second.load_result()) == ["k2", "k1", "k0"]


def test_a_restored_tensor_keeps_its_grad(store_dir: Path) -> None:
    """A tensor's ``.grad`` came back None (the generated tensors found it)."""
    weight = torch.zeros(3, requires_grad=True)
    weight.grad = torch.arange(3.0)
    restored = _copy_of.lookup({"w": weight})
    assert restored is None
    _copy_of({"w": weight})
    back = _copy_of.lookup({"w": weight}).load_result()["w"]
    assert back.requires_grad and back.grad is not None
    assert torch.equal(back.grad, weight.grad)
