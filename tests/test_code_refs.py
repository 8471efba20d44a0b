"""Digest-pinned code references: a stored value needing changed code is a miss.

Each test runs a small project in fresh processes and edits its source between
runs, as a user would.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from conftest import run_script

MODELS = '''
class Scaler:
    """A user class whose instances end up inside stored results."""

    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k


def transform(x):
    return x + 1


def helper(x):
    return x * 10
'''

SCRIPT = """
import importlib
import os
import sys

import models
from memostore import memo


def count():
    with open(os.environ["COUNTER"], "a") as f:
        f.write("ran\\n")


@memo
def build(name, k):
    # A module found by name at run time hides the class from the code closure:
    # only the digest pinned in the stored value can notice that its code changed.
    found = importlib.import_module("models")
    count()
    return {"obj": getattr(found, name)(k), "fn": getattr(found, "transform")}


@memo
def uses_helper(x):
    count()
    return models.helper(x)


result = build("Scaler", 3)
print(result["obj"].apply(2), result["fn"](1), uses_helper(2))
"""


def setup_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    (tmp_path / "models.py").write_text(textwrap.dedent(MODELS))
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    counter = tmp_path / "counter"
    env = {"COUNTER": str(counter), "MEMOSTORE_DIR": str(tmp_path / "store")}
    return script, counter, env


def runs(counter: Path) -> int:
    return counter.read_text().count("ran") if counter.exists() else 0


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_changed_class_inside_a_stored_result_is_recomputed(tmp_path: Path) -> None:
    script, counter, env = setup_project(tmp_path)
    assert run_script(script, env=env).stdout.split() == ["6", "2", "20"]
    assert runs(counter) == 2
    assert run_script(script, env=env).stdout.split() == ["6", "2", "20"]
    assert runs(counter) == 2  # both hit

    edit(tmp_path / "models.py", "return x * self.k", "return x * self.k + 100")
    assert run_script(script, env=env).stdout.split() == ["106", "2", "20"]
    assert runs(counter) == 3  # build recomputed (stale Scaler), uses_helper hit
    assert run_script(script, env=env).stdout.split() == ["106", "2", "20"]
    assert runs(counter) == 3


def test_changed_function_inside_a_stored_result_is_recomputed(tmp_path: Path) -> None:
    script, counter, env = setup_project(tmp_path)
    run_script(script, env=env)
    edit(tmp_path / "models.py", "return x + 1", "return x + 2")
    assert run_script(script, env=env).stdout.split() == ["6", "3", "20"]
    assert runs(counter) == 3


def test_comment_edits_keep_hitting_and_helper_edits_miss(tmp_path: Path) -> None:
    script, counter, env = setup_project(tmp_path)
    run_script(script, env=env)
    edit(tmp_path / "models.py", "def helper(x):\n", "def helper(x):\n    # a comment\n")
    edit(tmp_path / "models.py", '"""A user class', '"""An edited docstring; a user class')
    run_script(script, env=env)
    assert runs(counter) == 2  # nothing recomputed
    edit(tmp_path / "models.py", "return x * 10", "return x * 11")
    assert run_script(script, env=env).stdout.split() == ["6", "2", "22"]
    assert runs(counter) == 3  # only uses_helper recomputed
