"""A restored value is the value: generated values, stored by a miss, restored by a hit.

Values are drawn from what training code passes around (nested dicts in any
insertion order, OrderedDicts, defaultdicts with their factory, lists, tuples,
sets, shared and cyclic references, dataclasses, namedtuples, enums, numpy
arrays, tensors with views, strides, dtypes, ``requires_grad`` and ``.grad``).
Each goes through a memoised identity function in this process: a miss stores
it, a hit restores it, and :func:`assert_same_value` compares the two as a
program sees them: type, order, identity sharing, storage sharing and bytes.

The generator's seed is printed in pytest's header (``conftest.py``) and is
taken from ``MEMOSTORE_PROPERTY_SEED`` when set, to replay a run. A failure
it finds becomes a named test in ``test_roundtrip_regressions.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import itertools
import math
import os
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from memostore import memo

SCALE = float(os.environ.get("MEMOSTORE_PROPERTY_SCALE", "1"))
SEED = int(os.environ["MEMOSTORE_PROPERTY_SEED"])


@dataclasses.dataclass
class Config:
    name: Any
    extra: Any = None


Pair = namedtuple("Pair", "left right")


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@memo
def restored(value: Any, n: int) -> Any:
    """The miss stores a copy of *value*; a hit returns that copy restored."""
    return copy.deepcopy(value)


# A key of its own per round trip: an equal value met before (whose dicts or sets
# iterate in another order) would otherwise hit what that one stored.
_calls = itertools.count()


def round_trip(value: Any) -> tuple[Any, Any]:
    """(what the miss returned and stored, what the hit restored)."""
    n = next(_calls)
    miss = restored(value, n)
    assert_same_value(value, miss)
    assert restored.lookup(value, n) is not None, "the miss must have been stored"
    return miss, restored(value, n)


@pytest.fixture(autouse=True, scope="module")
def _store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    old = os.environ.get("MEMOSTORE_DIR")
    os.environ["MEMOSTORE_DIR"] = str(tmp_path_factory.mktemp("roundtrip") / "store")
    yield
    if old is None:
        del os.environ["MEMOSTORE_DIR"]
    else:
        os.environ["MEMOSTORE_DIR"] = old


# -- "the same value" ---------------------------------------------------------------------


def assert_same_value(a: Any, b: Any) -> None:
    """*b* is *a* as a program sees it (raises AssertionError naming where it is not)."""
    _Same().check(a, b, "value")


class _Same:
    def __init__(self) -> None:
        self.pairs: dict[int, int] = {}  # id in a -> id in b, for mutable objects
        self.back: dict[int, int] = {}
        self.storages: dict[int, int] = {}
        self.keep: list[Any] = []

    def shared(self, a: Any, b: Any, where: str) -> bool:
        """Whether *a* was met before (then *b* must be its partner: same sharing)."""
        seen = self.pairs.get(id(a))
        if seen is not None:
            assert seen == id(b), f"{where}: sharing differs (an object met twice is not)"
            return True
        assert id(b) not in self.back, f"{where}: two objects came back as one"
        self.pairs[id(a)] = id(b)
        self.back[id(b)] = id(a)
        self.keep += [a, b]
        return False

    def check(self, a: Any, b: Any, where: str) -> None:
        assert type(a) is type(b), f"{where}: {type(a).__name__} came back as {type(b).__name__}"
        if isinstance(a, float):
            assert (math.isnan(a) and math.isnan(b)) or repr(a) == repr(b), f"{where}: {a}!={b}"
            return
        if isinstance(a, (type(None), bool, int, str, bytes, complex, enum.Enum)):
            assert a == b or (a != a and b != b), f"{where}: {a!r} came back as {b!r}"
            return
        if isinstance(a, torch.Tensor):
            return self.tensor(a, b, where)
        if isinstance(a, np.ndarray):
            return self.array(a, b, where)
        mutable = not isinstance(a, (tuple, frozenset))
        if mutable and self.shared(a, b, where):
            return
        if isinstance(a, dict):
            assert list(map(repr, a)) == list(map(repr, b)), f"{where}: keys or order differ"
            if isinstance(a, defaultdict):
                assert a.default_factory is b.default_factory, f"{where}: factory differs"
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
                self.check(ka, kb, f"{where} key {ka!r}")
                self.check(va, vb, f"{where}[{ka!r}]")
        elif isinstance(a, (set, frozenset)):
            assert a == b, f"{where}: elements differ"
            # The order Python gives a set built from *a*'s elements in *a*'s order (as
            # copy and pickle do): colliding hashes may order a set by its history, which
            # no copy keeps.
            assert list(type(a)(list(a))) == list(b), f"{where}: iteration order differs"
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b), f"{where}: length differs"
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.check(x, y, f"{where}[{i}]")
        elif dataclasses.is_dataclass(a):
            assert list(vars(a)) == list(vars(b)), f"{where}: attributes or their order differ"
            for name in vars(a):
                self.check(getattr(a, name), getattr(b, name), f"{where}.{name}")
        else:
            raise AssertionError(f"{where}: no comparison for {type(a).__name__}")

    def tensor(self, a: torch.Tensor, b: torch.Tensor, where: str) -> None:
        if self.shared(a, b, where):
            return
        assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (
            b.dtype,
            b.shape,
            b.stride(),
            b.storage_offset(),
        ), f"{where}: dtype, shape, stride or offset differ"
        assert a.requires_grad == b.requires_grad, f"{where}: requires_grad differs"
        assert a.is_leaf == b.is_leaf, f"{where}: leaf-ness differs"
        sa, sb = a.untyped_storage(), b.untyped_storage()
        partner = self.storages.setdefault(sa.data_ptr(), sb.data_ptr())
        assert partner == sb.data_ptr(), f"{where}: storage sharing differs"
        assert bytes(sa) == bytes(sb), f"{where}: storage bytes differ"
        if a.grad is None:
            assert b.grad is None, f"{where}: .grad came back from nothing"
        else:
            assert b.grad is not None, f"{where}: .grad was lost"
            self.tensor(a.grad, b.grad, f"{where}.grad")

    def array(self, a: np.ndarray, b: np.ndarray, where: str) -> None:
        if self.shared(a, b, where):
            return
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: dtype or shape differ"
        assert a.tobytes() == b.tobytes(), f"{where}: bytes differ"
        assert a.flags.writeable == b.flags.writeable, f"{where}: writeable flag differs"


# -- what training code passes around ---------------------------------------------------

KEYS = st.one_of(
    st.text(max_size=6),
    st.integers(-1000, 1000),
    st.tuples(st.integers(0, 3), st.text(max_size=2)),
    st.sampled_from([f"layers.{i}.weight" for i in range(12)]),
)
ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from(list(Mode)),
)
FACTORIES: list[Callable[[], Any]] = [list, int, dict, set]


def _insertion_ordered(pairs: list[tuple[Any, Any]], kind: str) -> Any:
    if kind == "dict":
        return dict(pairs)
    if kind == "odict":
        return OrderedDict(pairs)
    out: defaultdict[Any, Any] = defaultdict(FACTORIES[len(pairs) % len(FACTORIES)])
    out.update(pairs)
    return out


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pairs = st.lists(st.tuples(KEYS, children), max_size=6)
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=4).map(tuple),
        st.builds(_insertion_ordered, pairs, st.sampled_from(["dict", "odict", "ddict"])),
        st.builds(Config, children, children),
        st.builds(Pair, children, children),
        st.frozensets(KEYS, max_size=5),
    )


def _shared(value: Any, how: int) -> Any:
    """*value* met more than once, or holding itself."""
    if how == 0:
        return [value, {"again": value}, (value,)]
    if how == 1:
        cycle: list[Any] = [value]
        cycle.append(cycle)
        return cycle
    holder: dict[str, Any] = {"value": value}
    holder["self"] = holder
    return Config(holder, holder)


PLAIN = st.recursive(ATOMS | st.sets(KEYS, max_size=5), _containers, max_leaves=10)
VALUES = st.one_of(PLAIN, st.builds(_shared, PLAIN, st.integers(0, 2)))

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8]
DTYPES += [torch.bool, torch.uint8]


@st.composite
def tensors(draw: st.DrawFn) -> Any:
    """A tensor with its views (slices, transposes, strides), grads and flags."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    base = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
    base = (base * draw(st.sampled_from([1.0, -0.5, 3.25]))).to(dtype)
    grads = dtype.is_floating_point and dtype not in (torch.float16, torch.bfloat16)
    if grads and draw(st.booleans()):
        base.requires_grad_(True)
        if draw(st.booleans()):
            base.grad = torch.ones_like(base)
    out: list[Any] = [base]
    with torch.no_grad():
        for _ in range(draw(st.integers(0, 3))):
            view = draw(st.sampled_from(["slice", "t", "step", "flat", "copy"]))
            if view == "slice":
                out.append(base[..., draw(st.integers(0, shape[-1] - 1)) :])
            elif view == "t" and base.dim() >= 2:
                out.append(base.transpose(0, 1))
            elif view == "step":
                out.append(base[..., ::2])
            elif view == "flat":
                out.append(base.view(-1))
            else:
                out.append(base.detach().clone())
    if draw(st.booleans()):
        return {f"layers.{i}.weight": t for i, t in reversed(list(enumerate(out)))}
    return out


@st.composite
def arrays(draw: st.DrawFn) -> Any:
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64", "bool", "uint8"]))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    array = np.arange(math.prod(shape)).reshape(shape).astype(dtype)
    return draw(st.sampled_from([array, {"x": array, "a": array}, [array, array.copy()]]))


def _settings(n: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Each example is a batch of independent values, stored and restored by one call, and
# compared one by one: 10,000 values in all, for the cost of 700 round trips.
@pytest.mark.filterwarnings("error::memostore.MemostoreWarning")
@seed(SEED)
@_settings(300)
@given(st.lists(VALUES, min_size=20, max_size=20))
def test_plain_values_restore_as_themselves(values: list[Any]) -> None:
    assert_same_value(*round_trip(values))


@pytest.mark.filterwarnings("error::memostore.MemostoreWarning")
@seed(SEED)
@_settings(250)
@given(st.lists(tensors(), min_size=10, max_size=10))
def test_tensors_restore_with_views_strides_dtypes_and_grads(values: list[Any]) -> None:
    assert_same_value(*round_trip(values))


@pytest.mark.filterwarnings("error::memostore.MemostoreWarning")
@seed(SEED)
@_settings(150)
@given(st.lists(arrays(), min_size=10, max_size=10))
def test_numpy_arrays_restore_with_their_sharing(values: list[Any]) -> None:
    assert_same_value(*round_trip(values))


def test_the_comparison_itself_sees_order_type_and_sharing(tmp_path: Path) -> None:
    """The property is only as strong as its comparison: each difference must fail it."""
    shared = [1]
    for a, b in [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        (OrderedDict(a=1), {"a": 1}),
        (defaultdict(list), defaultdict(int)),
        ([shared, shared], [[1], [1]]),
        (torch.zeros(2, 3).t(), torch.zeros(3, 2)),
        (torch.zeros(2, requires_grad=True), torch.zeros(2)),
        (Config(1, 2), Config(1, 3)),
    ]:
        with pytest.raises(AssertionError):
            assert_same_value(a, b)
