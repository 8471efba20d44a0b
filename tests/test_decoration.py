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
