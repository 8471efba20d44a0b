"""The reliability suite's summary: the figures each test reported, printed at the end."""

from __future__ import annotations

from typing import Any

from .faultkit import FIGURES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("reliability figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
