"""Library classes restore from their state only through a family.

A class of an installed library is made by ``__new__`` and given its stored
state only when it belongs to a family (Hugging Face models and
configurations: ``transformers``), never as "any class of a library the
program imported"; and no module is imported because a stored value names it.
A known family applies to what this machine stored; a value pulled from a
remote the store does not trust needs the family turned on.
"""

from __future__ import annotations

import textwrap

import pytest

from memostore import Store
from memostore.remote import push
from memostore.trust.state import restorable_from_state

from .labkit import VICTIM, Lab, code, lab, plant, warnings_in

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


def test_a_library_class_in_no_family_is_refused_with_the_fix(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(TEXTS))
    lab.run(lab.victim_store)
    again = lab.run(lab.victim_store)
    assert "COMPUTED" in again.stdout
    (line,) = warnings_in(again.stderr)
    assert 'memostore.add_safe_globals(["rich.text:Text"])' in line
    allowed = lab.run(lab.victim_store, MEMOSTORE_SAFE_GLOBALS="rich.text:Text")
    assert "COMPUTED" not in allowed.stdout and not warnings_in(allowed.stderr)


# The victim prints which of the planted classes' packages got imported.
IMPORTS_VICTIM = VICTIM.replace(
    'print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))',
    'print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))\n'
    '    print("IMPORTED", sorted({"rich", "transformers"} & set(sys.modules)))',
)


@pytest.mark.parametrize(
    "cls",
    [
        code("rich.text", "Text"),
        code("transformers.models.gpt2.configuration_gpt2", "GPT2Config"),
    ],
    ids=["rich", "transformers (family off)"],
)
def test_no_module_is_imported_because_a_value_names_it(lab: Lab, cls: dict) -> None:
    lab.script.write_text(textwrap.dedent(IMPORTS_VICTIM))
    lab.run(lab.attacker_store)
    plant(lab.attacker_store, [{"$": "object", "cls": cls, "args": []}])
    push(Store(lab.attacker_store), str(lab.remote))
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    proc = lab.victim_meets_attack()
    assert "IMPORTED []" in proc.stdout
    (line,) = warnings_in(proc.stderr)
    if cls["module"].startswith("transformers"):
        assert 'memostore.trust.allow_state_family("transformers")' in line
        assert "MEMOSTORE_STATE_FAMILIES=transformers" in line


MODELS = """
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from memostore import memo


@memo
def build(n):
    print("COMPUTED")
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=32, n_positions=16)
    return GPT2LMHeadModel(config), config


if __name__ == "__main__":
    torch.manual_seed(0)
    model, config = build(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    out = model(torch.arange(4)[None]).logits
    print("RESULT", type(model).__name__, config.n_embd, model.config is not None,
          [round(x, 4) for x in out[0, 0, :3].tolist()])
"""


@pytest.mark.slow
def test_hugging_face_models_restore_when_ours_or_with_their_family_on(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(MODELS))
    first = lab.run(lab.victim_store)
    assert "COMPUTED" in first.stdout
    result = [line for line in first.stdout.splitlines() if line.startswith("RESULT")]
    # What this machine stored restores as it was, with no family turned on.
    ours = lab.run(lab.victim_store)
    assert "COMPUTED" not in ours.stdout and not warnings_in(ours.stderr), ours.stderr
    assert result and result[0] in ours.stdout.splitlines()
    # The same model pulled from a remote this store does not trust: the family is off.
    push(Store(lab.victim_store), str(lab.remote))
    pulled = lab.store("pulled")
    lab.cli(pulled, "remote", "add", "team", str(lab.remote))
    lab.cli(pulled, "pull", "team")
    off = lab.run(pulled)
    assert "COMPUTED" in off.stdout
    assert any("allow_state_family" in line for line in warnings_in(off.stderr)), off.stderr
    # (A store of its own: the miss above stored the recomputed result in the first.)
    pulled_on = lab.store("pulled-on")
    lab.cli(pulled_on, "remote", "add", "team", str(lab.remote))
    lab.cli(pulled_on, "pull", "team")
    on = lab.run(pulled_on, MEMOSTORE_STATE_FAMILIES="transformers")
    assert "COMPUTED" not in on.stdout and not warnings_in(on.stderr), on.stderr
    assert result[0] in on.stdout.splitlines()


def test_the_state_rule_itself() -> None:
    import pandas
    import rich.text
    import tqdm
    from packaging.version import Version

    assert restorable_from_state(rich.text.Text)  # a condition of families, not a permission
    assert not restorable_from_state(Version)  # its own __setstate__
    assert not restorable_from_state(tqdm.tqdm)  # its own __del__
    assert not restorable_from_state(pandas.DataFrame)
