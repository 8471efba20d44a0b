"""Fingerprints of modules and datasets: every change that alters the stored form is seen.

The repeated digest of a module or dataset reuses the cached one while the
fingerprint is equal (``torch_codecs/fingerprints.py``), and the fingerprint
is built with shortcuts (per-layout plans for module dicts, tensors described
in bulk, modules compared by id). Each test here changes one thing and checks
that the cached digest equals a digest computed from scratch.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memostore import Store  # noqa: E402
from memostore.odb.verified import forget_known, hashed_bytes  # noqa: E402
from memostore.values.decoding import Decoder, _Frame  # noqa: E402
from memostore.values.encoding import Encoder, HashSink, StoreSink  # noqa: E402
from torch_codecs.blobs import MMAP_MIN_BYTES  # noqa: E402
from torch_codecs.fingerprints import NotProvable, snapshot  # noqa: E402


def cached(value: Any) -> str:
    return Encoder(HashSink()).encode_value(value)


def fresh(value: Any) -> str:
    return Encoder(HashSink(), cache=None).encode_value(value)


def deep_model() -> torch.nn.Module:
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    inner[2].register_buffer("running", torch.zeros(3))
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sequential(inner))


def _leaf(m: torch.nn.Module) -> torch.nn.Linear:
    return m[1][0][2]


def _hook(module: Any, args: Any, out: Any) -> None:
    return None


def _add_one(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.add_(1)  # bumps the version counter


def _set_data(m: torch.nn.Module, make: Callable[[torch.Tensor], torch.Tensor]) -> None:
    w = _leaf(m).weight
    w.data = make(w.data)


MUTATIONS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "deep int attribute": lambda m: setattr(_leaf(m), "out_features", 7),
    "deep attribute type (int -> float)": lambda m: setattr(_leaf(m), "in_features", 3.0),
    "deep attribute type (bool -> int)": lambda m: setattr(_leaf(m), "training", 1),
    "new deep attribute": lambda m: setattr(_leaf(m), "note", "x"),
    "eval()": lambda m: m.eval(),
    "eval() of a deep submodule": lambda m: _leaf(m).eval(),
    "forward hook on a deep submodule": lambda m: _leaf(m).register_forward_hook(_hook),
    "pre-hook on the root": lambda m: m.register_forward_pre_hook(lambda *a: None),
    "in-place change of a deep weight": lambda m: _add_one(_leaf(m).weight),
    "requires_grad_(False)": lambda m: _leaf(m).weight.requires_grad_(False),
    "new deep parameter": lambda m: _leaf(m).register_parameter(
        "extra", torch.nn.Parameter(torch.ones(2))
    ),
    "parameter set to None": lambda m: setattr(_leaf(m), "bias", None),
    "new persistent buffer": lambda m: _leaf(m).register_buffer("steps", torch.zeros(1)),
    "new non-persistent buffer": lambda m: _leaf(m).register_buffer(
        "scratch", torch.zeros(1), persistent=False
    ),
    "child replaced": lambda m: m[1][0].__setitem__(1, torch.nn.Tanh()),
    "child removed (None)": lambda m: m[1][0].register_module("1", None),
    "weight replaced by a new Parameter": lambda m: setattr(
        _leaf(m), "weight", torch.nn.Parameter(torch.ones(2, 3))
    ),
    "attribute set on a Parameter": lambda m: setattr(_leaf(m).weight, "tag", "frozen"),
    ".data = a transposed view (shape, stride)": lambda m: _set_data(m, lambda w: w.t()),
    ".data = a narrower view (shape)": lambda m: _set_data(m, lambda w: w[:1]),
    ".data = the same bytes as int32 (dtype)": lambda m: setattr(
        _leaf(m).running, "data", _leaf(m).running.data.view(torch.int32)
    ),
    ".data = another storage": lambda m: _set_data(m, lambda w: w.clone() + 1),
    "submodule registered twice": lambda m: m.register_module("again", _leaf(m)),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_module_mutation_changes_the_cached_digest(name: str) -> None:
    model = deep_model()
    before = cached(model)
    assert cached(model) == before == fresh(model)
    MUTATIONS[name](model)
    after = cached(model)
    assert after == fresh(model), f"stale digest after: {name}"
    assert after != before, f"{name} changes the stored form"


def test_module_tied_weights_and_aliasing_are_tracked() -> None:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(a, b)
    untied = cached(model)
    b.weight = a.weight  # tie: one Parameter under two names
    tied = cached(model)
    assert tied == fresh(model) != untied


def test_hook_removal_and_reregistration() -> None:
    model = deep_model()
    plain = cached(model)
    handle = _leaf(model).register_forward_hook(_hook)
    hooked = cached(model)
    handle.remove()
    assert cached(model) == fresh(model) == plain != hooked


def test_many_modules_of_one_class_share_a_plan_but_not_a_digest() -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(40)])
    before = cached(model)
    model[37].out_features = 3
    assert cached(model) == fresh(model) != before
    model[37].out_features = 2
    assert cached(model) == fresh(model) == before


def test_dataset_of_many_tensors_sees_each_tensor() -> None:
    tensors = [torch.randn(8) for _ in range(1000)]
    ds = torch.utils.data.TensorDataset(*tensors)
    first = cached(ds)
    tensors[500].add_(1)  # in place, deep inside: the version counter moves
    second = cached(ds)
    assert second == fresh(ds) != first
    tensors[999].requires_grad_(True)
    third = cached(ds)
    assert third == fresh(ds) != second
    tensors[3].data = tensors[3].data[:4]  # .data assignment: shape
    assert cached(ds) == fresh(ds) != third


def test_dataset_tensor_replaced_by_a_new_tensor() -> None:
    ds = torch.utils.data.TensorDataset(*[torch.zeros(4) for _ in range(20)])
    before = cached(ds)
    ds.tensors = (*ds.tensors[:-1], torch.ones(4))
    assert cached(ds) == fresh(ds) != before


def test_replaced_objects_never_match_a_dead_snapshot() -> None:
    # A new tensor may be born at a dead one's address with the same metadata:
    # the snapshot's references tell them apart.
    ds = torch.utils.data.TensorDataset(torch.zeros(16))
    old = snapshot(ds)
    for _ in range(20):
        ds.tensors = (torch.full((16,), 3.0),)
        assert snapshot(ds) != old


def test_untrackable_tensors_are_not_provable() -> None:
    with torch.inference_mode():
        inference = torch.ones(2)
    sparse = torch.nn.Linear(2, 2)
    sparse.register_buffer("mask", torch.ones(2).to_sparse())
    for value in (
        torch.utils.data.TensorDataset(*[torch.ones(2) for _ in range(20)], inference),
        torch.nn.Sequential(torch.nn.Linear(2, 2), sparse),
    ):
        with pytest.raises(NotProvable):
            snapshot(value)
        assert cached(value) == fresh(value)


def test_mapped_blobs_are_proven_before_their_node_decodes(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    tensor = torch.randn(MMAP_MIN_BYTES // 4)
    doc_id = Encoder(StoreSink(store.objects)).encode_value(tensor)
    node = store.objects.get_doc(doc_id).body["node"]
    shutil.rmtree(store.root / "verified")  # as in a copied store: nothing proven yet
    forget_known()
    before = hashed_bytes()
    dec = Decoder(store.objects)
    dec._frames.append(_Frame())  # decode one node: its after-callbacks never run
    restored = dec.node(node)
    assert hashed_bytes() - before == store.objects.size_of(node["data"]["blob"])
    assert torch.equal(restored, tensor)
    again = Decoder(store.objects).decode_value(doc_id)  # proven and recorded: no hashing
    assert hashed_bytes() - before == store.objects.size_of(node["data"]["blob"])
    assert torch.equal(again, tensor)
