"""What ``@memo`` refuses when it decorates, and where its warnings point."""

from __future__ import annotations

import ast
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memostore import MemostoreError, MemostoreWarning, Store, memo

REPO = Path(__file__).resolve().parent.parent


def numbers(n: int) -> Iterator[int]:
    yield from range(n)


async def fetch(n: int) -> int:
    return n


async def stream(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


@pytest.mark.parametrize(
    ("fn", "kind", "instead"),
    [
        (numbers, "a generator function", "returns a list"),
        (fetch, "an async def function", "call it from the coroutine"),
        (stream, "an async generator function", "returns a list"),
    ],
    ids=["generator", "async", "async-generator"],
)
def test_deferred_bodies_are_refused_when_decorated(fn: object, kind: str, instead: str) -> None:
    for decorate in (memo, memo(), memo(version="2")):
        with pytest.raises(MemostoreError) as info:
            decorate(fn)  # type: ignore[call-overload]
        message = str(info.value)
        assert fn.__qualname__ in message and kind in message, message  # type: ignore[attr-defined]
        assert "plain def helper" in message and instead in message, message


def test_a_warning_points_at_the_line_that_called(tmp_path: Path) -> None:
    @memo(store=Store(tmp_path / "store"))
    def lock(n: int) -> object:
        return threading.Lock()  # cannot be stored: returned with a warning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lock(1)
        line = _line_of_this() - 1
    ours = [w for w in caught if issubclass(w.category, MemostoreWarning)]
    assert ours and all(w.filename == __file__ for w in ours), [
        (w.filename, w.lineno) for w in ours
    ]
    assert ours[0].lineno == line


def _line_of_this() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_every_memostore_warning_goes_through_one_helper() -> None:
    """No module but memostore/errors.py calls warnings.warn with MemostoreWarning."""
    offenders = []
    for package in ("memostore", "torch_codecs", "cli"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "memostore" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "warn"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "warnings"
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, offenders


def test_a_store_path_that_is_a_file_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner
    from memostore_cli.main import cli

    from memostore.odb.store import Store as StoreClass

    not_a_dir = tmp_path / "store-file"
    not_a_dir.write_text("notes\n")
    monkeypatch.setenv("MEMOSTORE_DIR", str(not_a_dir))

    @memo
    def double(n: int) -> int:
        return 2 * n

    # From code: the call still returns, and the warning says what to change.
    with pytest.warns(MemostoreWarning, match=r"is a file.*MEMOSTORE_DIR.*directory"):
        assert double(21) == 42
    for path in (not_a_dir, not_a_dir / "inside"):
        with pytest.raises(MemostoreError, match=r"MEMOSTORE_DIR") as info:
            StoreClass(path)
        assert "File exists" not in str(info.value)
    # From the CLI: one line that names the fix, not "create one by running...".
    result = CliRunner().invoke(cli, ["log"])
    assert result.exit_code == 1, result.output
    assert "is a file" in result.output and "MEMOSTORE_DIR" in result.output, result.output
    assert "running a memoised function" not in result.output
    assert not_a_dir.read_text() == "notes\n"


def test_a_new_store_keeps_itself_out_of_git(tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    Store(tmp_path / ".memostore")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == "", status.stdout


def test_a_misspelt_function_name_suggests_the_recorded_one(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from memostore_cli.main import cli

    root = tmp_path / "store"

    @memo(store=Store(root))
    def train(n: int) -> int:
        return n

    train(1)
    for args in (["show", "trian"], ["log", "trian"], ["diff", "trian", "train"], ["rm", "trian"]):
        result = CliRunner().invoke(cli, ["--store", str(root), *args])
        assert result.exit_code == 1, (args, result.output)
        assert "did you mean 'train'?" in result.output, (args, result.output)
    far = CliRunner().invoke(cli, ["--store", str(root), "show", "zzzz_unrelated"])
    assert "did you mean" not in far.output


# A site customisation that makes `import pygit2` fail, as where the git extra is not installed.
_NO_PYGIT2 = """
import importlib.abc
import sys


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pygit2" or name.startswith("pygit2."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""

_CALL = """
import json, sys
from memostore import Store, memo

@memo(store=sys.argv[1])
def double(n):
    return 2 * n

assert double(21) == 42 and double(21) == 42
print(json.dumps({"pygit2": "pygit2" in sys.modules,
                  "provenance": double.lookup(21).provenance}))
"""


def test_provenance_is_recorded_without_pygit2(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_PYGIT2)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "call.py").write_text(_CALL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    check = subprocess.run(
        [sys.executable, "-c", "import pygit2"], env=env, capture_output=True, text=True
    )
    assert "No module named 'pygit2'" in check.stderr, check.stderr
    done = subprocess.run(
        [sys.executable, "call.py", str(tmp_path / "store")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    provenance = report["provenance"]
    assert not report["pygit2"]
    assert provenance["python"] and provenance["host"] and provenance["pid"]
    assert provenance["git"] == {"commit": None, "branch": None, "dirty": None, "root": None}
