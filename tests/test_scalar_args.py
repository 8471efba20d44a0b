"""Arguments of small scalars: their cached documents are exactly the encoder's.

A call key is part of the store's format: the cached document of ``lr=0.01``
must have the id the general encoder gives it, or every stored call made
before would miss.
"""

from __future__ import annotations

from typing import Any

import pytest

from memostore.values import scalar_args
from memostore.values.encoding import Encoder, HashSink

VALUES: list[Any] = [
    0,
    -1,
    1,
    2**62,
    -(2**63) + 1,
    True,
    False,
    None,
    0.0,
    -0.0,
    1.0,
    0.1,
    1e-300,
    1e16,
    -2.5e-7,
    "",
    "1",
    'quote " and \\ backslash',
    "unicode: é ✓ \u2028",
    "x" * 256,
]


def _general_id(items: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(scalar_args, "document", lambda items: None)
        return Encoder(HashSink()).encode_mapping(items)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_cached_document_has_the_general_encoders_id(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [("x", value), ("y", 2)]
    expected = _general_id(items, monkeypatch)
    assert scalar_args.document(items) is not None
    for _ in range(2):  # built, then found
        sink = HashSink()
        assert Encoder(sink).encode_mapping(items) == expected
        assert expected in sink.docs  # a miss stores it from the sink


def test_equal_values_of_other_types_or_signs_key_apart() -> None:
    ids = {Encoder(HashSink()).encode_mapping([("x", v)]) for v in (1, 1.0, True, "1", 0.0, -0.0)}
    assert len(ids) == 6


@pytest.mark.parametrize(
    "value", [2**63, -(2**63), "x" * 257, float("nan"), float("inf"), (1, 2), b"1"], ids=repr
)
def test_other_values_take_the_general_path(value: Any) -> None:
    assert scalar_args.document([("x", value)]) is None
