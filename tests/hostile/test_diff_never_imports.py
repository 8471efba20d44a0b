"""``diff`` and ``show`` never import what only the store names.

A writer of a shared store chooses every evaluation's ``function`` and
``provenance.cwd``; plants a module there, or in the directory the victim
works in, under the name the evaluation gives. Reading the store (``show``,
``diff A B``, ``diff ID``) must never import it. ``diff FN``, where the victim
typed the function's name, imports FN's module as ``python -c "import mod"``
would from the current directory, and nothing else.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import run_script, write_script

from memostore import Store

from .fskit import cli

LIB = """
from memostore import memo


@memo
def train(n):
    return n + 1
"""

RUNNER = """
import sys
import lib

lib.train(int(sys.argv[1]))
"""

PLANTED = """
import pathlib
pathlib.Path({marker!r}, {name!r}).touch()
"""


def _world(tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    """(store, the victim's working directory, markers, evaluation ids) after two runs."""
    recorded, here, markers = tmp_path / "recorded", tmp_path / "here", tmp_path / "markers"
    for d in (recorded, here, markers):
        d.mkdir()
    store = tmp_path / "store"
    write_script(recorded, "lib.py", LIB)
    runner = write_script(recorded, "run.py", RUNNER)
    for n in ("1", "2"):
        run_script(runner, n, env={"MEMOSTORE_DIR": str(store)}, cwd=recorded)
    ids = sorted(i for _, i in Store(store).refs.iter("evals/"))
    assert len(ids) == 2
    # Beside the recorded cwd, and in the victim's own directory, under the name the
    # evaluations give: importing either would run it.
    (recorded / "lib.py").write_text(
        textwrap.dedent(PLANTED.format(marker=str(markers), name="recorded"))
    )
    (here / "lib.py").write_text(textwrap.dedent(PLANTED.format(marker=str(markers), name="here")))
    return store, here, markers, ids


def test_reading_the_store_never_imports_what_it_names(tmp_path: Path) -> None:
    store, here, markers, (a, b) = _world(tmp_path)
    for args in (
        ["show", a],
        ["show", a, "--json"],
        ["show", "train"],
        ["diff", a, b],
        ["diff", "train~1", "train", "--json"],
        ["diff", a],
        ["diff", a[:8], "--json"],
        ["log"],
    ):
        proc = cli(store, *args, cwd=here)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        assert list(markers.iterdir()) == [], args
    verdict = json.loads(cli(store, "diff", a, "--json", cwd=here).stdout)
    assert verdict["method"] == "source"
    assert any("not imported" in note for note in verdict["notes"]), verdict
    assert list(markers.iterdir()) == []


def test_diff_of_a_function_the_user_names_imports_it_from_here_only(tmp_path: Path) -> None:
    store, here, markers, _ = _world(tmp_path)
    proc = cli(store, "diff", "train", "--json", cwd=here)
    assert proc.returncode == 0, proc.stderr
    # As `python -c "import lib"` in here would: this directory's lib, never the recorded one.
    assert sorted(p.name for p in markers.iterdir()) == ["here"]
