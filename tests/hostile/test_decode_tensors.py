"""Tensors are checked as ``torch.load(weights_only=True)`` checks them, and more.

A crafted tensor node that checks out against its id must not become a tensor
that reads or writes outside its memory: a sparse tensor whose indices lie
outside its shape (``to_dense()`` would write out of bounds), a compressed one
whose row pointers do, a view whose offset or strides reach past its storage
(``Tensor.set_`` does not check). Each is a miss, and the process goes on.
"""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import pytest

from memostore import Store

from .labkit import Lab, lab, plant, warnings_in

__all__ = ["lab"]  # the fixture, imported

TENSORS = """
import sys

import torch

from memostore import memo


@memo
def compute(kind, n):
    print("COMPUTED")
    if kind == "coo":
        return torch.sparse_coo_tensor([[n]], [1.0], [n + 1])
    if kind == "csr":
        dense = torch.zeros(2, n + 1)
        dense[1, n] = 1.0
        return dense.to_sparse_csr()
    base = torch.arange(float(n + 1))
    return [base, base[1:]]


if __name__ == "__main__":
    kind, n = sys.argv[1], int(sys.argv[2])
    value = compute(kind, n)
    if n < 100:  # the victim uses its value: to_dense() writes every stored index
        dense = value.to_dense() if kind != "view" else value[1]
        print("RESULT", dense.tolist())
"""


def _node(store: Store, ref: str) -> Any:
    return store.objects.get_doc(store.evaluation(store.refs.read(ref)).body["result"]).body["node"]


def _calls(store: Store) -> dict[tuple[str, int], str]:
    out = {}
    for ref, evaluation_id in store.refs.iter("evals/"):
        hparams = store.evaluation(evaluation_id).body["hparams"]
        out[(hparams["kind"], hparams["n"])] = ref
    return out


def _coo(big: Any, small: Any) -> Any:
    # Indices of a 2**40-element tensor, in a 4-element one.
    return {**big, "shape": small["shape"]}


def _csr(big: Any, small: Any) -> Any:
    return {**big, "shape": small["shape"]}


def _view(big: Any, small: Any) -> Any:
    node = copy.deepcopy(small)
    node[1]["data"]["offset"] = 1 << 30  # a view a gigabyte past its 4-element storage
    return node


CASES = {"coo": _coo, "csr": _csr, "view": _view}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_tensor_outside_its_memory_is_a_miss(lab: Lab, kind: str) -> None:
    lab.script.write_text(textwrap.dedent(TENSORS))
    lab.run(lab.victim_store, kind, "3")
    lab.run(lab.victim_store, kind, str(1 << 40 if kind == "coo" else 1000))
    store = Store(lab.victim_store)
    calls = _calls(store)
    small_ref = calls[(kind, 3)]
    big = _node(store, calls[(kind, 1 << 40 if kind == "coo" else 1000)])
    plant(lab.victim_store, CASES[kind](big, _node(store, small_ref)), ref=small_ref)
    proc = lab.run(lab.victim_store, kind, "3")  # a crash would fail here (returncode)
    assert "COMPUTED" in proc.stdout, proc.stderr
    assert "RESULT" in proc.stdout
    assert len(warnings_in(proc.stderr)) == 1, proc.stderr
    again = lab.run(lab.victim_store, kind, "3")
    assert "COMPUTED" not in again.stdout and not warnings_in(again.stderr)


@pytest.mark.parametrize("dtype", ["qint8", "quint4x2", "uint3"])
def test_a_tensor_of_a_dtype_the_blob_does_not_restore_is_a_miss(lab: Lab, dtype: str) -> None:
    """A quantized view (its scale and zero point are not in any blob) or a bit-packed
    one would be served as a tensor whose next operation trips an assertion of torch."""
    lab.script.write_text(textwrap.dedent(TENSORS))
    lab.run(lab.victim_store, "view", "3")
    store = Store(lab.victim_store)
    ref = _calls(store)[("view", 3)]
    node = copy.deepcopy(_node(store, ref))
    node[1]["dtype"] = dtype  # the view; its base stays a float tensor
    plant(lab.victim_store, node, ref=ref)
    proc = lab.run(lab.victim_store, "view", "3")
    assert "COMPUTED" in proc.stdout and "RESULT [1.0, 2.0, 3.0]" in proc.stdout, proc.stderr
    (warned,) = warnings_in(proc.stderr)
    assert f"dtype '{dtype}', which is not restored" in warned, warned
