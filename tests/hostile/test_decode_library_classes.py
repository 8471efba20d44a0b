"""Classes of installed libraries: restored from their state when that runs none of their code.

A model or configuration class of a library the program imports (a Hugging Face
model and its config) is made by ``__new__`` and given its stored state, as
pickle would, without an entry in the registry. The rule is narrow: a class
with a ``__new__``, ``__setstate__``, ``__reduce__`` or ``__del__`` of its own
is refused, a class never *called* from a stored value, and only libraries the
program has imported are looked at.
"""

from __future__ import annotations

import textwrap

import pytest

from memostore.trust.gate import restorable_from_state

from .labkit import VICTIM, Lab, code, lab, plant, reduce, warnings_in

__all__ = ["lab"]  # the fixture, imported

TEXTS = """
import sys

import rich.text
from memostore import memo


@memo
def compute(n):
    print("COMPUTED")
    return [rich.text.Text(f"epoch {n}", end="!"), n + 1]


if __name__ == "__main__":
    print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
"""


def test_a_library_class_that_runs_no_code_of_its_own_restores(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(TEXTS))
    first = lab.run(lab.victim_store)
    assert "COMPUTED" in first.stdout
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout and not warnings_in(again.stderr), again.stderr
    assert again.stdout == first.stdout.replace("COMPUTED\n", "")


# The victim, with the libraries of the planted classes in use.
LIBRARY_VICTIM = VICTIM.replace(
    "from memostore import memo",
    "import packaging.version  # noqa: F401\nimport pandas  # noqa: F401\n"
    "import rich.text  # noqa: F401\nimport tqdm  # noqa: F401\nfrom memostore import memo",
)


@pytest.mark.parametrize(
    "node",
    [
        # __del__ of its own: it would run on the stored state when dropped.
        {
            "$": "object",
            "cls": code("tqdm.std", "tqdm"),
            "args": [],
            "state": {"$": "dict", "items": []},
        },
        # __setstate__ of its own (NDFrame's; packaging's Version has one too).
        {"$": "object", "cls": code("pandas.core.frame", "DataFrame"), "args": []},
        {"$": "object", "cls": code("packaging.version", "Version"), "args": []},
        # A library class called with stored arguments: never, whatever the class.
        reduce(code("rich.text", "Text"), "hello"),
    ],
    ids=["__del__", "__setstate__", "__setstate__ 2", "called"],
)
def test_library_classes_that_would_run_their_code_are_refused(lab: Lab, node: dict) -> None:
    lab.script.write_text(textwrap.dedent(LIBRARY_VICTIM))
    lab.run(lab.attacker_store)
    plant(lab.attacker_store, [node])
    proc = lab.victim_meets_attack(lab.attacker_store)
    assert warnings_in(proc.stderr), "a refusal is named in a warning"


def test_the_rule_itself() -> None:
    import pandas
    import rich.text
    import tqdm
    from packaging.version import Version

    assert restorable_from_state(rich.text.Text)
    assert not restorable_from_state(Version)
    assert not restorable_from_state(tqdm.tqdm)
    assert not restorable_from_state(pandas.DataFrame)
