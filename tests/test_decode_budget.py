"""The decode budget and the digest walk: both scale with what a value holds, not with its graph.

Decoding charges what it builds to one budget proportional to the bytes it read
(``memostore/values/budget.py``); encoding writes shared immutable structure
once per document, so 40 nested tuples each holding the one before twice cost
80 nodes, not 2**40. Both are checked here in one process, through the
encoder and decoder themselves; the hostile versions (a pulled store, a real
victim) are in ``tests/hostile/test_decode_budget.py``.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from codec_helpers import digest, roundtrip

from memostore import Store, memo
from memostore.errors import DecodeBudgetExceeded, DecodeError
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.values.budget import BASE_BYTES, PER_BYTE_READ
from memostore.values.decoding import Decoder
from memostore.values.encoding import (
    SHARED_IMMUTABLE_NODES,
    Encoder,
    StoreSink,
    digest_of_doc_node,
)


def _shared_tuples(depth: int) -> tuple[Any, ...]:
    value: tuple[Any, ...] = (0,)
    for _ in range(depth):
        value = (value, value)
    return value


def _decode(store: Store, node: Any, docs: set[str] | None = None) -> Any:
    doc = Doc(KIND_VALUE, {"node": node}, Links(docs=docs or set()))
    return Decoder(store.objects).decode_value(store.objects.add_doc(doc))


def test_shared_tuples_are_encoded_once_per_document() -> None:
    store = Store.in_memory()
    doc_id = Encoder(StoreSink(store.objects)).encode_value(_shared_tuples(20))
    # Written out at every occurrence, the document would take megabytes.
    assert store.objects.size_of(doc_id) < 4096


def test_a_local_value_of_shared_tuples_keys_in_linear_time(tmp_path: Any) -> None:
    @memo(store=Store(tmp_path / "store"))
    def f(x: Any) -> int:
        return 1

    assert len(f.key(_shared_tuples(40))) == 64  # 2**40 nodes if walked as a tree


def test_shared_tuples_restore_shared_and_equal() -> None:
    value = _shared_tuples(12)
    restored, _ = roundtrip([value, value[0]], Store.in_memory())
    assert restored == [value, value[0]]
    assert restored[0][0] is restored[0][1] is restored[1]


def test_small_shared_tuples_keep_their_digest() -> None:
    """A small tuple is written out wherever it stands: sharing does not change its digest."""
    small = tuple(range(SHARED_IMMUTABLE_NODES - 2))
    assert digest([small, small]) == digest([small, tuple(list(small))])
    big = tuple(range(SHARED_IMMUTABLE_NODES))
    assert digest({"a": big, "b": big}) != digest({"a": big, "b": tuple(list(big))})


def test_a_long_plain_list_keys_as_it_always_did() -> None:
    """The fast path for long lists of one scalar type gives the nodes the slow path gave."""
    for items in (
        list(range(-100, 100)),
        [float(i) / 3 for i in range(100)],
        [str(i) for i in range(100)],
        [True, False] * 50,
        [None] * 100,
    ):
        # Each item is its own node: the document holds the list as it is.
        assert digest(items) == digest_of_doc_node(items)
        assert digest(items[:10]) == digest_of_doc_node(items[:10])  # the per-item path
    store = Store.in_memory()
    for odd in ([float("nan")] * 100, [10**700] * 100, [1.0, float("inf")] * 50):
        restored, _ = roundtrip(odd, store)
        assert repr(restored) == repr(odd)


@pytest.mark.parametrize(
    "node",
    [
        {
            "$": "reduce",
            "fn": {"$": "code", "module": "builtins", "qualname": "bytearray"},
            "args": [2 * BASE_BYTES],
        },
        {
            "$": "reduce",
            "fn": {"$": "code", "module": "builtins", "qualname": "list"},
            "args": [
                {
                    "$": "reduce",
                    "fn": {"$": "code", "module": "builtins", "qualname": "range"},
                    "args": [BASE_BYTES],
                }
            ],
        },
    ],
    ids=["bytearray(n)", "list(range(n))"],
)
def test_a_call_is_charged_before_it_runs(node: Any) -> None:
    with pytest.raises(DecodeBudgetExceeded, match="decode budget"):
        _decode(Store.in_memory(), node)


def test_the_allowance_grows_with_the_bytes_read() -> None:
    store = Store.in_memory()
    size = BASE_BYTES // 4
    filler = "x" * (size // PER_BYTE_READ)  # inline: the document itself is that large
    call = {
        "$": "reduce",
        "fn": {"$": "code", "module": "builtins", "qualname": "bytes"},
        "args": [BASE_BYTES + size // 2],
    }
    assert len(_decode(store, [filler, call])[1]) == BASE_BYTES + size // 2
    with pytest.raises(DecodeBudgetExceeded):
        _decode(store, [filler[: len(filler) // 4], call])


def test_a_document_repeated_by_reference_is_paid_each_time() -> None:
    store = Store.in_memory()
    leaf = store.objects.add_doc(Doc(KIND_VALUE, {"node": list(range(1000))}))
    middle_node = [{"$": "ref", "id": leaf}] * 1000
    middle = store.objects.add_doc(Doc(KIND_VALUE, {"node": middle_node}, Links(docs={leaf})))
    assert len(_decode(store, [{"$": "ref", "id": middle}], {middle})[0]) == 1000
    with pytest.raises(DecodeBudgetExceeded):
        _decode(store, [{"$": "ref", "id": middle}] * 1000, {middle})


def test_nesting_past_the_bound_is_refused_even_with_a_deep_stack() -> None:
    node: Any = [0]
    for _ in range(1100):
        node = [node]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # the budget's depth bound, not the stack, stops it
    try:
        with pytest.raises(DecodeError, match="nested more than 1000"):
            _decode(Store.in_memory(), node)
    finally:
        sys.setrecursionlimit(limit)
