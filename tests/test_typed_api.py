"""The public API is typed: a user's script type-checks under mypy --strict.

``./scripts/test`` runs ``mypy --strict examples/typed_usage.py``; this test
proves that check can fail: the same run flags misuse of a memoised function.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from memostore import memo
from memostore.call.memoize import MemoizedFunction

mypy_api = pytest.importorskip("mypy.api")

REPO = Path(__file__).resolve().parent.parent

MISUSE = """
from memostore import memo

@memo
def f(a: int) -> str:
    return str(a)

@memo(ignore=("b",), version="1")
def g(a: int, b: int = 0) -> str:
    return str(a)

wrong_return: int = f(1)
f.key("not an int")
g.lookup(1, 2, 3)
reveal_type(g.__wrapped__)
"""


def test_mypy_strict_accepts_the_example_and_flags_misuse(tmp_path: Path) -> None:
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE)
    example = REPO / "examples" / "typed_usage.py"
    out, _, _ = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--config-file",
            str(REPO / "pyproject.toml"),
            str(example),
            str(misuse),
        ]
    )
    lines = out.splitlines()
    assert not [line for line in lines if line.startswith(str(example))], out
    errors = [line for line in lines if ": error:" in line]
    assert any(":12: error: Incompatible types in assignment" in e for e in errors), out
    assert any(':13: error: Argument 1 to "key"' in e for e in errors), out
    assert any(':14: error: Too many arguments for "lookup"' in e for e in errors), out
    assert 'Revealed type is "def (a: int, b: int =) -> str"' in out


def test_every_form_of_memo_keeps_the_signature() -> None:
    def f(a: int, b: int = 2) -> int:
        return a + b

    for wrapped in (memo(f), memo()(f), memo(ignore=("b",), version="1")(f)):
        assert isinstance(wrapped, MemoizedFunction)
        assert wrapped.__wrapped__ is f
        assert inspect.signature(wrapped) == inspect.signature(f)
        assert wrapped.__name__ == "f"


def test_the_package_declares_its_types() -> None:
    import memostore

    assert (Path(memostore.__file__).parent / "py.typed").is_file()


def test_ci_runs_mypy_strict_on_the_example() -> None:
    lines = (REPO / "scripts" / "test").read_text().splitlines()
    assert any(line.startswith("mypy --strict examples/typed_usage.py") for line in lines)
