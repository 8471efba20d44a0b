"""Tree guards: the fast proof that a module tree is unchanged must never say so wrongly.

A repeated digest of a model reuses the cached one when its :class:`TreeGuard`
holds (``torch_codecs/module_guards.py``). Each mutation here changes what a
model's stored form depends on; the guard built before it must stop holding,
and the digest must follow. Changes that keep the stored form (a float set
again to an equal value) may make the guard fail; the digest then stays.
"""

from __future__ import annotations

import ctypes
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from test_torch_fingerprints import MUTATIONS, _add_one, _leaf, cached, deep_model, fresh  # noqa: E402

from torch_codecs.module_guards import TreeGuard  # noqa: E402


def conv_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.LayerNorm([4, 5, 5]),
        torch.nn.Dropout(0.25),
        torch.nn.InstanceNorm2d(4, track_running_stats=True),
    )
    model[3].schedule = [1, 2]  # a plain list attribute
    return model


def _rename(m: torch.nn.Module, old: str, new: str) -> None:
    value = m.__dict__.pop(old)
    m.__dict__[new] = value


def _move_bias(m: torch.nn.Module) -> None:
    a, b = m[0], _leaf(m)
    bias = b._parameters.pop("bias")
    a._parameters["bias2"] = bias


GUARD_MUTATIONS: dict[str, Callable[[torch.nn.Module], Any]] = {
    **MUTATIONS,
    "attribute renamed, same value": lambda m: _rename(_leaf(m), "out_features", "width"),
    "hook dict replaced by None": lambda m: setattr(_leaf(m), "_forward_hooks", None),
    "parameter moved to another module": _move_bias,
    "dtype of the whole model (.half())": lambda m: m.half(),
    "non-persistent set emptied in place": lambda m: m.__dict__["_non_persistent_buffers_set"].add(
        "running"
    ),
}

CONV_MUTATIONS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "list attribute mutated in place": lambda m: m[3].schedule.__setitem__(0, 3),
    "list items change type": lambda m: m[3].schedule.__setitem__(0, 1.0),
    "kernel tuple items change type": lambda m: setattr(m[0], "kernel_size", (3.0, 3)),
    "momentum changed": lambda m: setattr(m[1], "momentum", 0.5),
    "a training step (batch-norm statistics)": lambda m: m(torch.randn(2, 3, 5, 5)),
    "running mean written by F.batch_norm": lambda m: torch.nn.functional.batch_norm(
        torch.randn(3, 4), m[1].running_mean, m[1].running_var, training=True
    ),
    "dropout p changed": lambda m: setattr(m[3], "p", 0.5),
    "a None parameter set": lambda m: setattr(m[4], "weight", torch.nn.Parameter(torch.ones(4))),
}


def transformer() -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def _swap_defaults(m: torch.nn.Module) -> None:
    def relu(x: Any, inplace: bool = False) -> Any:
        return torch.relu(x)

    m.layers[0].activation = relu
    guard = TreeGuard.build(m)
    assert guard is not None
    relu.__defaults__ = (True,)
    assert not guard.holds(m)


TRANSFORMER_MUTATIONS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "activation replaced": lambda m: setattr(m.layers[1], "activation", torch.nn.functional.gelu),
    "activation replaced by a builtin": lambda m: setattr(m.layers[1], "activation", torch.tanh),
    "attention weight updated": lambda m: _add_one(m.layers[0].self_attn.in_proj_weight),
    "norm_first flipped": lambda m: setattr(m.layers[0], "norm_first", True),
}


def _cases() -> list[Any]:
    tables = (
        (deep_model, GUARD_MUTATIONS),
        (conv_model, CONV_MUTATIONS),
        (transformer, TRANSFORMER_MUTATIONS),
    )
    return [
        pytest.param(make, change, id=f"{make.__name__}: {name}")
        for make, table in tables
        for name, change in table.items()
    ]


@pytest.mark.parametrize(("make", "change"), _cases())
def test_guard_fails_after_each_change_of_the_stored_form(
    make: Callable[[], torch.nn.Module], change: Callable[[torch.nn.Module], Any]
) -> None:
    model = make()
    guard = TreeGuard.build(model)
    assert guard is not None and guard.holds(model)
    before = fresh(model)
    change(model)
    assert fresh(model) != before, "the change alters the stored form"
    assert not guard.holds(model)


@pytest.mark.parametrize(("make", "change"), _cases())
def test_cached_digest_follows_every_change(
    make: Callable[[], torch.nn.Module], change: Callable[[torch.nn.Module], Any]
) -> None:
    model = make()
    first = cached(model)
    assert cached(model) == cached(model) == first  # the second call built the guard
    change(model)
    assert cached(model) == fresh(model) != first


def test_equal_values_set_again_keep_the_digest() -> None:
    model = conv_model()
    before = cached(model)
    cached(model)
    model[1].eps = float("1e-05")  # a new float object, equal to the old one
    model[0].kernel_size = (3, 3)  # a new tuple, equal
    assert cached(model) == fresh(model) == before
    assert cached(model) == before  # and the guard, rebuilt, holds again


def test_guard_does_not_keep_the_model_alive() -> None:
    model = deep_model()
    cached(model)
    cached(model)
    ref = weakref.ref(model)
    weights = weakref.ref(_leaf(model).weight)
    del model
    gc.collect()
    assert ref() is None and weights() is None


def test_guard_dies_with_a_submodule_it_watched() -> None:
    model = deep_model()
    guard = TreeGuard.build(model)
    assert guard is not None
    model[1] = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    gc.collect()
    assert not guard.alive.ok and not guard.holds(model)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.LSTM(2, 2),  # a __getstate__ of its own
        lambda: torch.nn.Sequential(torch.nn.Linear(2, 2), None),  # None for a submodule
        lambda: _hooked(),
        lambda: _twice(),
    ],
    ids=["custom getstate", "None submodule", "hooks", "submodule twice"],
)
def test_unusual_trees_get_no_guard_and_still_cache(make: Callable[[], torch.nn.Module]) -> None:
    model = make()
    assert TreeGuard.build(model) is None
    first = cached(model)
    assert cached(model) == fresh(model) == first


def _hooked() -> torch.nn.Module:
    m = torch.nn.Linear(2, 2)
    m.register_forward_hook(lambda *a: None)
    return m


def _twice() -> torch.nn.Module:
    inner = torch.nn.Linear(2, 2)
    return torch.nn.Sequential(inner, inner)


def test_a_big_model_is_guarded() -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(300)])
    guard = TreeGuard.build(model)
    assert guard is not None and guard.holds(model)
    with torch.no_grad():
        model[299].bias.add_(1)
    assert not guard.holds(model)


def _random_change(model: torch.nn.Module, rng: Any) -> tuple[str, Callable[[], Any]]:
    """One random change (or none) to a part of *model*: its name and a thunk."""
    m = rng.choice(list(model.modules()))
    tensors = [t for t in (*m._parameters.values(), *m._buffers.values()) if t is not None]
    choices: list[tuple[str, Callable[[], Any]]] = [
        ("nothing", lambda: None),
        ("train/eval", lambda: m.train(rng.random() < 0.5)),
        ("set note", lambda: setattr(m, "note", rng.choice([1, 1.0, True, "1", None, (1,), [1]]))),
        ("drop note", lambda: m.__dict__.pop("note", None)),
        ("new buffer", lambda: m.register_buffer(f"b{rng.randrange(3)}", torch.zeros(2))),
        ("forward", lambda: model(torch.randn(2, 3, 5, 5))),
    ]
    if tensors:
        t = rng.choice(tensors)
        choices += [
            (".data write", lambda: t.data.add_(1)),  # no version bump: an exposure
            ("numpy write", lambda: t.detach().numpy().__setitem__((), 1.5)),
            ("in place", lambda: torch.no_grad()(t.add_)(1)),
        ]
    params = [p for p in m._parameters.values() if p is not None]
    if params:
        p = rng.choice(params)
        choices.append(("requires_grad", lambda: p.requires_grad_(not p.requires_grad)))
    return rng.choice(choices)


def test_random_changes_never_leave_a_stale_digest() -> None:
    import random

    rng = random.Random(7)
    model = conv_model()
    done: list[str] = []
    for _ in range(200):
        name, change = _random_change(model, rng)
        change()
        done.append(name)
        assert cached(model) == fresh(model), f"stale after: {done[-5:]}"


def test_forget_digest_of_a_model_forgets_its_tensors() -> None:
    from memostore import forget_digest

    model = deep_model()
    before = cached(model)
    cached(model)
    weight = _leaf(model).weight
    # A write through a raw pointer (as a C extension makes) moves no counter and
    # exposes nothing: invisible, as documented.
    one = torch.ones(1, dtype=weight.dtype)
    ctypes.memmove(weight.data_ptr(), one.data_ptr(), one.element_size())
    assert cached(model) == before
    forget_digest(model)
    assert cached(model) == fresh(model) != before


def test_a_function_attribute_is_watched_for_new_defaults() -> None:
    _swap_defaults(transformer())


def test_data_assignment_over_the_same_storage_is_seen() -> None:
    # ``t.data = other`` moves no version counter and here keeps the data pointer:
    # only its shape and stride change, which the guard sees as an exposure.
    model = deep_model()
    cached(model)
    before = cached(model)  # now guarded
    weight = _leaf(model).weight
    weight.data = weight.detach().t()
    assert cached(model) == fresh(model) != before
