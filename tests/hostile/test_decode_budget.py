"""Every decode runs under one budget: a pulled result cannot make a hit allocate what it asks.

A result document of a few hundred bytes asks an allowed constructor for a
gigabyte (``bytearray(1_200_000_000)``, ``list(range(N))``, ``torch.Tensor(N)``,
``nn.Linear(N, N)``), references another document a million times, or nests
deeper than the stack. Each is a miss whose reason names the budget, the
victim's process never holds the memory (its peak RSS stays far below one
attack's size), and its store keeps serving its own results.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memostore import Store
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.remote import push

from .labkit import Lab, code, lab, plant, reduce, warnings_in
from .remotekit import remote_url

__all__ = ["lab", "remote_url"]  # the fixtures, imported

# The victim calls compute(n) for every n it is given, says which computed and why,
# and reports the most memory its process ever held.
VICTIM = """
import sys

import memostore
from memostore import memo

memostore.set_verbose(True)
if "--deep-stack" in sys.argv:
    sys.setrecursionlimit(200_000)  # only the budget's own depth bound stops a deep value


@memo
def compute(n):
    print("COMPUTED", n)
    return [n, n + 1]


if __name__ == "__main__":
    if "--torch" in sys.argv:
        import torch  # noqa: F401
    for n in [int(a) for a in sys.argv[1:] if not a.startswith("--")]:
        print("RESULT", n, compute(n))
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))
    print("PEAK_MB", peak)
"""

GIB = 1_200_000_000  # what each attack would allocate, at least, if it were obeyed
Attack = Callable[[Store], Any]


def _builtin(name: str) -> dict[str, Any]:
    return code("builtins", name)


def _range(n: int) -> dict[str, Any]:
    return reduce(_builtin("range"), n)


def _doc(store: Store, node: Any, docs: set[str] | None = None) -> str:
    doc = Doc(KIND_VALUE, {"node": node}, Links(docs=docs or set()))
    return store.objects.add_doc(doc)


def _ref_bomb(store: Store) -> Any:
    """Three documents of a few KB that decode, without the budget, to 8 GB of lists."""
    leaf = _doc(store, list(range(1000)))
    middle = _doc(store, [{"$": "ref", "id": leaf}] * 1000, {leaf})
    top = _doc(store, [{"$": "ref", "id": middle}] * 1000, {middle})
    return [{"$": "ref", "id": top}]


def _deep_chain(store: Store) -> Any:
    """Documents each holding a list that holds the next: 5000 deep, each one shallow."""
    doc_id = _doc(store, [0])
    for _ in range(5000):
        doc_id = _doc(store, [{"$": "ref", "id": doc_id}], {doc_id})
    return [{"$": "ref", "id": doc_id}]


PLAIN: dict[str, Attack] = {
    "bytearray(n)": lambda s: reduce(_builtin("bytearray"), GIB),
    "bytes(n)": lambda s: reduce(_builtin("bytes"), GIB),
    "list(range(n))": lambda s: reduce(_builtin("list"), _range(GIB // 8)),
    "tuple(range(n))": lambda s: reduce(_builtin("tuple"), _range(GIB // 8)),
    "frozenset(range(n))": lambda s: reduce(_builtin("frozenset"), _range(GIB // 8)),
    "deque(range(n))": lambda s: reduce(code("collections", "deque"), _range(GIB // 8)),
    "Counter(range(n))": lambda s: reduce(code("collections", "Counter"), _range(GIB // 8)),
    "bytes.__new__ by an object node": lambda s: {
        "$": "object",
        "cls": _builtin("bytes"),
        "args": [GIB],
    },
    "__newobj__(bytes, n)": lambda s: reduce(code("copyreg", "__newobj__"), _builtin("bytes"), GIB),
    "_reconstructor(bytearray, bytearray, n)": lambda s: reduce(
        code("copyreg", "_reconstructor"), _builtin("bytearray"), _builtin("bytearray"), GIB
    ),
    "numpy.ndarray(shape)": lambda s: reduce(
        code("numpy", "ndarray"), {"$": "tuple", "items": [GIB // 8]}
    ),
    "numpy _reconstruct(ndarray, shape)": lambda s: reduce(
        code("numpy._core.multiarray", "_reconstruct"),
        code("numpy", "ndarray"),
        {"$": "tuple", "items": [GIB]},
        {"$": "bytes", "hex": "62"},
    ),
    # SeedSequence's pool is sized by a keyword only: asked through __newobj_ex__.
    "SeedSequence(pool_size=n)": lambda s: reduce(
        code("copyreg", "__newobj_ex__"),
        code("numpy.random.bit_generator", "SeedSequence"),
        {"$": "tuple", "items": []},
        {"$": "dict", "items": [["pool_size", GIB // 4]]},
    ),
    "a document referenced a million times": _ref_bomb,
}

TORCH: dict[str, Attack] = {
    "torch.Tensor(n)": lambda s: reduce(code("torch", "Tensor"), GIB // 4),
    "torch.Tensor(n, m)": lambda s: reduce(code("torch", "Tensor"), 40_000, 10_000),
    "nn.Linear(n, n)": lambda s: reduce(code("torch.nn.modules.linear", "Linear"), 20_000, 20_000),
    "nn.Embedding(n, m)": lambda s: reduce(
        code("torch.nn.modules.sparse", "Embedding"), 1_000_000, 400
    ),
}


def _plant_all(lab: Lab, store_path: Path, attacks: dict[str, Attack], *flags: str) -> list[str]:
    """Run the victim's calls in *store_path* and replace each result by an attack."""
    names = sorted(attacks)
    ns = [str(i) for i in range(1, len(names) + 1)]
    lab.run(store_path, *ns, *flags)
    store = Store(store_path)
    refs = {
        store.evaluation(eid).body["hparams"]["n"]: ref for ref, eid in store.refs.iter("evals/")
    }
    for i, name in enumerate(names, start=1):
        plant(store_path, attacks[name](store), ref=refs[i])
    return ns


def _meets(lab: Lab, ns: list[str], names: list[str], *flags: str) -> int:
    """The victim's run: every call computes with a budget reason; its peak RSS in MB."""
    proc = lab.run(lab.victim_store, *ns, *flags)
    out = proc.stdout + proc.stderr
    for n, name in zip(ns, names, strict=True):
        assert f"COMPUTED {n}\n" in proc.stdout, f"{name} was served:\n{out}"
        assert f"RESULT {n} [{n}, {int(n) + 1}]" in proc.stdout, out
    # One warning per kind of reason in a process; every miss line names its own.
    assert any("decode budget" in w or "nested" in w for w in warnings_in(proc.stderr)), out
    misses = [line for line in proc.stderr.splitlines() if ": miss key " in line]
    reasons = [m for m in misses if "decode budget" in m or "nested" in m]
    assert len(reasons) == len(ns), f"each attack is a miss that names its reason:\n{out}"
    again = lab.run(lab.victim_store, *ns, *flags)  # the store serves the victim's own results
    assert "COMPUTED" not in again.stdout, again.stdout + again.stderr
    return int(proc.stdout.split("PEAK_MB ")[1].split()[0])


def test_pulled_results_that_ask_for_memory_are_misses_within_budget(
    lab: Lab, remote_url: str
) -> None:
    lab.script.write_text(textwrap.dedent(VICTIM))
    ns = _plant_all(lab, lab.attacker_store, PLAIN)
    push(Store(lab.attacker_store), remote_url)
    lab.cli(lab.victim_store, "remote", "add", "team", remote_url)
    lab.cli(lab.victim_store, "pull", "team")
    peak = _meets(lab, ns, sorted(PLAIN))
    assert peak < GIB // 3 >> 20, f"the victim held {peak} MB"


def test_torch_constructors_and_modules_are_charged_before_they_run(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(VICTIM))
    ns = _plant_all(lab, lab.victim_store, TORCH, "--torch")
    peak = _meets(lab, ns, sorted(TORCH), "--torch")
    # torch alone takes a few hundred MB; each attack would take more than 1.1 GB.
    assert peak < 900, f"the victim held {peak} MB"


def test_a_value_nested_past_the_depth_bound_is_a_miss_even_with_a_deep_stack(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(VICTIM))
    ns = _plant_all(lab, lab.victim_store, {"deep": _deep_chain})
    proc = lab.run(lab.victim_store, *ns, "--deep-stack")
    assert "COMPUTED 1" in proc.stdout, proc.stderr
    (warned,) = warnings_in(proc.stderr)
    assert "nested more than 1000" in warned, warned


@pytest.mark.parametrize("size", [10_000, 2_000_000])
def test_an_honest_large_value_stays_within_its_budget(lab: Lab, size: int) -> None:
    """The budget grows with what is read: large genuine values still hit."""
    value = f"[n, n + 1, [b'x' * n] * 4, [list(range({size}))] * 3]"
    script = VICTIM.replace("return [n, n + 1]", f"return {value}")
    lab.script.write_text(textwrap.dedent(script))
    lab.run(lab.victim_store, "1000000")
    again = lab.run(lab.victim_store, "1000000")
    assert "COMPUTED" not in again.stdout, again.stderr
