"""Metric logging inside the store, TensorBoard-style.

Write with :class:`SummaryWriter` (TensorBoard's interface) or :func:`log`;
points go to an append-only journal while the evaluation runs and are sealed
into content-addressed column chunks when it ends. Read sealed logs back with
:func:`metrics_summary`, :func:`load_series` and :func:`load_events`; follow
evaluations still running with :func:`running_evaluations` and
:class:`LiveLogs`. ``docs/logging.md`` describes the design and the formats.

Names are imported on first use: the journal, which every memoised call
opens, needs no NumPy, and a program that never logs does not load it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LiveLogs": "live",
    "RunningEvaluation": "running",
    "SummaryWriter": "writer",
    "journal_roots": "recover",
    "json_number": "seal",
    "load_events": "read",
    "load_manifest": "read",
    "load_series": "read",
    "log": "native",
    "logged_hparams": "read",
    "metrics_summary": "read",
    "recover_orphans": "recover",
    "running_evaluations": "running",
    "sparkline": "read",
    "tag_sparkline": "read",
}

__all__ = [
    "LiveLogs",
    "RunningEvaluation",
    "SummaryWriter",
    "journal_roots",
    "json_number",
    "load_events",
    "load_manifest",
    "load_series",
    "log",
    "logged_hparams",
    "metrics_summary",
    "recover_orphans",
    "running_evaluations",
    "sparkline",
    "tag_sparkline",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memostore.metrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from .live import LiveLogs
    from .native import log
    from .read import (
        load_events,
        load_manifest,
        load_series,
        logged_hparams,
        metrics_summary,
        sparkline,
        tag_sparkline,
    )
    from .recover import journal_roots, recover_orphans
    from .running import RunningEvaluation, running_evaluations
    from .seal import json_number
    from .writer import SummaryWriter
