"""How memostore's types look from user code: checked by ``mypy --strict`` in CI.

mypy --strict examples/typed_usage.py
"""

from __future__ import annotations

from memostore import Evaluation, memo


@memo
def scale(values: list[float], factor: float = 2.0) -> list[float]:
    """Every value times *factor*."""
    return [v * factor for v in values]


@memo()
def total(values: list[float]) -> float:
    return sum(values)


@memo(ignore=("verbose",), version="2")
def describe(name: str, verbose: bool = False) -> dict[str, int]:
    return {name: len(name)}


def main() -> None:
    doubled: list[float] = scale([1.0, 2.0], factor=3.0)  # the function's own return type
    first: float = doubled[0] + total(doubled)
    key: str = scale.key([1.0, 2.0], factor=3.0)  # the call key, nothing runs
    found: Evaluation | None = scale.lookup([1.0, 2.0])
    plain: list[float] = scale.__wrapped__([1.0])  # the undecorated function
    sizes: dict[str, int] = describe("memo", verbose=True)
    status = found.status if found is not None else "not stored"
    print(first, key[:8], status, plain, sizes, describe.key("memo"))


if __name__ == "__main__":
    main()
