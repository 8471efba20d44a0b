"""What the allowlist lets through: value types, the user's code, and what the user adds."""

from __future__ import annotations

import textwrap

import pytest

import memostore
from memostore import Store
from memostore.trust import get_safe_globals

from .labkit import Lab, code, lab, plant, reduce, warnings_in

__all__ = ["lab"]  # the fixture, imported

VALUES = """
import argparse, collections, datetime, decimal, enum, fractions, functools, pathlib, sys, uuid

import numpy as np

from memostore import memo


class Colour(enum.Enum):
    RED = 1
    BLUE = 2


Pair = collections.namedtuple("Pair", "a b")


def scale(x, factor):
    return x * factor


@memo
def values(n):
    print("COMPUTED")
    return {
        "colour": Colour.BLUE,
        "pair": Pair(n, 2),
        "when": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2024, 5, 1),
        "span": datetime.timedelta(seconds=90),
        "money": decimal.Decimal("1.25"),
        "third": fractions.Fraction(1, 3),
        "id": uuid.UUID(int=n),
        "path": pathlib.PurePosixPath("/data/train"),
        "args": argparse.Namespace(epochs=n, lr=0.1),
        "ordered": collections.OrderedDict(b=1, a=2),
        "counts": collections.Counter("abca"),
        "groups": collections.defaultdict(list, {"x": [1]}),
        "queue": collections.deque([1, 2], maxlen=5),
        "twice": functools.partial(scale, factor=2),
        "slice": slice(1, n),
        "range": range(n),
        "error": ValueError("bad", n),
        "scalar": np.float32(1.5),
        "dtype": np.dtype([("a", "<f8"), ("b", "<i4")]),
        "rng": np.random.default_rng(n),
    }


def show(v):
    rng = v.pop("rng").integers(0, 1000, 3).tolist()
    twice = v.pop("twice")(21)
    error = v.pop("error")
    return repr(sorted(v.items(), key=lambda kv: kv[0])) + f" {rng} {twice} {error.args}"


if __name__ == "__main__":
    print("RESULT", show(values(3)))
"""


def test_value_types_and_the_users_code_restore_without_a_warning(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(VALUES))
    first = lab.run(lab.victim_store)
    assert "COMPUTED" in first.stdout
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout, again.stderr
    assert not warnings_in(again.stderr)
    assert again.stdout == first.stdout.replace("COMPUTED\n", "")


LIBRARY = """
import ipaddress, os, sys

import memostore
from memostore import memo

if os.environ.get("ALLOW") == "api":
    memostore.add_safe_globals([ipaddress.IPv4Address])


@memo
def address(n):
    print("COMPUTED")
    return [ipaddress.IPv4Address(n)]


@memo
def table(n):
    print("COMPUTED")
    return {"gateway": ipaddress.IPv4Address(n)}


if __name__ == "__main__":
    print("RESULT", address(1), address(1), table(2), table(2))
"""


def test_a_library_class_needs_add_safe_globals_and_is_warned_about_once_per_function(
    lab: Lab,
) -> None:
    lab.script.write_text(textwrap.dedent(LIBRARY))
    proc = lab.run(lab.victim_store)
    # Each second call meets the stored value, refuses it and computes.
    assert proc.stdout.count("COMPUTED") == 4
    # One warning per function that meets the class, in the whole process.
    lines = warnings_in(proc.stderr)
    assert len(lines) == 2 and "address:" in lines[0] and "table:" in lines[1], lines
    for line in lines:
        assert 'memostore.add_safe_globals(["ipaddress:IPv4Address"])' in line
        assert "MEMOSTORE_SAFE_GLOBALS=ipaddress:IPv4Address" in line
    expected = "RESULT [IPv4Address('0.0.0.1')] [IPv4Address('0.0.0.1')]"
    for allow in ({"ALLOW": "api"}, {"MEMOSTORE_SAFE_GLOBALS": "ipaddress:IPv4Address"}):
        proc = lab.run(lab.victim_store, **allow)
        assert "COMPUTED" not in proc.stdout and expected in proc.stdout, allow
        assert not warnings_in(proc.stderr)


def test_a_package_prefix_trusts_what_its_modules_define(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(LIBRARY))
    lab.run(lab.victim_store)
    proc = lab.run(lab.victim_store, MEMOSTORE_SAFE_GLOBALS="json.*, ipaddress.*")
    assert "COMPUTED" not in proc.stdout and not warnings_in(proc.stderr)


def test_add_safe_globals_takes_names_objects_modules_and_prefixes() -> None:
    import ipaddress
    import math

    memostore.add_safe_globals(
        [ipaddress.IPv6Address, "ipaddress:IPv4Network", math, "email.mime.*"]
    )
    listed = get_safe_globals()
    assert "ipaddress:IPv6Address" in listed and "ipaddress:IPv4Network" in listed
    assert "math (module)" in listed and "email.mime.*" in listed
    assert "copyreg:_reconstructor" in listed and "builtins:getattr" not in listed
    for bad in ("os:", "not a name", "pkg.*.x"):
        with pytest.raises(ValueError, match="write"):
            memostore.add_safe_globals([bad])
    with pytest.raises(TypeError):
        memostore.add_safe_globals("ipaddress:IPv4Address")  # a string, not a list
    with pytest.raises(TypeError, match="no importable name"):
        memostore.add_safe_globals([lambda: 0])


ENUM = """
import enum

from memostore import memo


class Colour(enum.Enum):
    RED = 1
    BLUE = 2


@memo
def favourite(n):
    print("COMPUTED")
    return [Colour(n)]


if __name__ == "__main__":
    print("RESULT", favourite(2))
"""


def test_an_enum_member_pickled_by_getattr_restores_and_getattr_does_nothing_else(
    lab: Lab,
) -> None:
    """Python 3.12 pickles members as getattr(cls, name): only that use of getattr is kept."""
    lab.script.write_text(textwrap.dedent(ENUM))
    lab.run(lab.victim_store)
    store = Store(lab.victim_store)
    ((_, evaluation_id),) = store.refs.iter("evals/")
    node = store.objects.get_doc(store.evaluation(evaluation_id).body["result"]).body["node"]
    (member,) = node  # {"$": "reduce", "fn": <Colour>, "args": [2]}
    assert member["$"] == "reduce"
    as_getattr = reduce(code("builtins", "getattr"), member["fn"], "BLUE")
    plant(lab.victim_store, [as_getattr])
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" not in proc.stdout and "RESULT [<Colour.BLUE: 2>]" in proc.stdout
    assert not warnings_in(proc.stderr)
    plant(lab.victim_store, [reduce(code("builtins", "getattr"), member["fn"], "__init__")])
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" in proc.stdout and "only looks up enum members" in proc.stderr
