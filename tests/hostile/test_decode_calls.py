"""Decoding calls only code references the gate lets be called, and writes state.

A ``reduce`` node calls a registry callable or a class of the user's code, named
by a code node: never an object decoded from the value (a library instance
restored from its state), never a plain function of the user's code unless the
user listed it. State is written into an instance, never applied through the
class's properties, ``__setitem__`` or ``append``.
"""

from __future__ import annotations

import textwrap

import pytest

from .labkit import VICTIM, Lab, code, code_digest, lab, plant, reduce, warnings_in

__all__ = ["lab"]  # the fixture, imported

HELPERS = """
def write_report(path, text):
    with open(path, "w") as f:
        f.write(text)


def pair(a, b):
    return (a, b)
"""

# The victim, using numpy, pygit2 and its own helpers, and saying whether the
# process's git settings are still its own after the call.
GIT_VICTIM = VICTIM.replace(
    "from memostore import memo",
    "import numpy  # noqa: F401\nimport pygit2\n\nimport helpers  # noqa: F401\n"
    "from memostore import memo",
).replace(
    'print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))',
    'print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))\n'
    "    level = pygit2.enums.ConfigLevel.GLOBAL\n"
    '    print("GIT", pygit2.settings.owner_validation, pygit2.settings.search_path[level])',
)


def _object(cls: dict, **fields: object) -> dict:
    return {"$": "object", "cls": cls, "args": [], **fields}


def _dict(**items: object) -> dict:
    return {"$": "dict", "items": [[k, v] for k, v in items.items()]}


def _tester(lab: Lab) -> dict:
    """numpy's PytestTester, made from its state, then called on a planted test suite."""
    suite = lab.outside / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(f"open({str(lab.marker)!r}, 'w').close()\n")
    (suite / "test_x.py").write_text("def test_x():\n    pass\n")
    tester = _object(code("numpy._pytesttester", "PytestTester"), state=_dict(module_name="numpy"))
    return reduce(tester, "fast", 1, None, False, False, -1, [str(suite)])


def _user_function(lab: Lab) -> dict:
    digest = code_digest(lab.project, "helpers", "write_report")
    return reduce(code("helpers", "write_report", digest=digest), str(lab.marker), "pwned")


ATTACKS = {
    "a library instance restored from state, called": _tester,
    "a function of the user's code, called with chosen arguments": _user_function,
    # pickle's 6th element: a setter that is an object decoded from the value.
    "a decoded object as the state setter": lambda lab: _object(
        code("collections", "OrderedDict"),
        state=str(lab.marker),
        setstate=_object(code("pygit2.settings", "Settings")),
    ),
    # copyreg._reconstructor given a decoded object instead of a class.
    "a reconstructor given an object": lambda lab: reduce(
        code("copyreg", "_reconstructor"),
        _object(code("pygit2.settings", "Settings")),
        code("builtins", "object"),
        None,
    ),
    # Properties run on stored state: owner validation off, for the whole process.
    "a library class's property setter": lambda lab: _object(
        code("pygit2.settings", "Settings"),
        state={"$": "tuple", "items": [None, _dict(owner_validation=False)]},
    ),
    # __setitem__ run on stored items: the process's global git config moved.
    "a library class's __setitem__": lambda lab: {
        **_object(code("pygit2.settings", "SearchPathList")),
        "dictitems": [[4, str(lab.outside)]],
    },
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_decoding_calls_nothing_decoded_and_applies_no_state(lab: Lab, name: str) -> None:
    lab.script.write_text(textwrap.dedent(GIT_VICTIM))
    (lab.project / "helpers.py").write_text(textwrap.dedent(HELPERS))
    first = lab.run(lab.victim_store)
    (git_line,) = [line for line in first.stdout.splitlines() if line.startswith("GIT ")]
    plant(lab.victim_store, [1, [ATTACKS[name](lab)]])
    proc = lab.victim_meets_attack()
    assert len(warnings_in(proc.stderr)) == 1, proc.stderr
    assert git_line in proc.stdout.splitlines(), "the process's git settings changed"


def test_a_user_function_is_called_only_when_the_user_lists_it(lab: Lab) -> None:
    (lab.project / "helpers.py").write_text(textwrap.dedent(HELPERS))
    lab.script.write_text(textwrap.dedent(GIT_VICTIM))
    lab.run(lab.victim_store)
    digest = code_digest(lab.project, "helpers", "pair")
    node = reduce(code("helpers", "pair", digest=digest), 3, 4)
    plant(lab.victim_store, node)
    refused = lab.run(lab.victim_store)
    assert "COMPUTED" in refused.stdout
    (line,) = warnings_in(refused.stderr)
    assert "helpers:pair" in line and 'memostore.add_safe_globals(["helpers:pair"])' in line
    plant(lab.victim_store, node)  # the refused call stored its own result meanwhile
    allowed = lab.run(lab.victim_store, MEMOSTORE_SAFE_GLOBALS="helpers:pair")
    assert "COMPUTED" not in allowed.stdout and "RESULT (3, 4)" in allowed.stdout


CONTAINERS = """
import sys

from memostore import memo


class Bag(dict):
    pass


class Stack(list):
    __slots__ = ("top",)


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


@memo
def compute(n):
    print("COMPUTED")
    bag = Bag(a=n)
    bag.label = "bag"
    stack = Stack([n, n + 1])
    stack.top = n + 1
    return [bag, stack, Point(n, -n)]


if __name__ == "__main__":
    bag, stack, point = compute(3)
    print("RESULT", dict(bag), bag.label, list(stack), stack.top, point.x, point.y)
"""


def test_the_users_dict_and_list_subclasses_and_slots_still_restore(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(CONTAINERS))
    first = lab.run(lab.victim_store)
    assert "RESULT {'a': 3} bag [3, 4] 4 3 -3" in first.stdout
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout and not warnings_in(again.stderr), again.stderr
    assert again.stdout == first.stdout.replace("COMPUTED\n", "")
