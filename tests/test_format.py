"""Golden ids: the digests in docs/format.md are exactly what the code computes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from memostore.call.memoize import call_key
from memostore.odb.objects import digest_bytes
from memostore.values.encoding import Encoder, HashSink

FORMAT_MD = Path(__file__).resolve().parent.parent / "docs" / "format.md"


def golden() -> dict[str, str]:
    rows = {}
    for line in FORMAT_MD.read_text().splitlines():
        match = re.match(r"^\| (.+?) \| .* \| `([0-9a-f]{64})` \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def value_id(value) -> str:
    return Encoder(HashSink(), cache=None, lineage=None).encode_value(value)


def args_id(items) -> str:
    return Encoder(HashSink(), cache=None, lineage=None).encode_mapping(items)


CASES = {
    "blob `hello`": lambda: digest_bytes(b"hello"),
    "value `1`": lambda: value_id(1),
    "value `1.0`": lambda: value_id(1.0),
    "value `True`": lambda: value_id(True),
    'value `"1"`': lambda: value_id("1"),
    "value `None`": lambda: value_id(None),
    "value `[1, 2.5, None]`": lambda: value_id([1, 2.5, None]),
    'value `{"b": 1, "a": (1, "x")}`': lambda: value_id({"b": 1, "a": (1, "x")}),
    "value `{3, 1, 2}`": lambda: value_id({3, 1, 2}),
    'value `b"\\x00\\x01"`': lambda: value_id(b"\x00\x01"),
    "value NaN": lambda: value_id(float("nan")),
    "value `np.arange(4, dtype=np.int32)`": lambda: value_id(np.arange(4, dtype=np.int32)),
    "arguments `n=3, lr=0.001`": lambda: args_id([("n", 3), ("lr", 0.001)]),
    "key of `pkg.mod:train`, code `0` x 64, those arguments, no version": lambda: call_key(
        "pkg.mod:train", "0" * 64, args_id([("n", 3), ("lr", 0.001)]), None
    ),
}


def test_every_golden_row_is_checked() -> None:
    assert set(golden()) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_id(name: str) -> None:
    assert CASES[name]() == golden()[name]
