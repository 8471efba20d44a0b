"""Metric logging inside the store, TensorBoard-style.

Write with :class:`SummaryWriter` (TensorBoard's interface) or :func:`log`;
points go to an append-only journal while the evaluation runs and are sealed
into content-addressed column chunks when it ends. Read them back with
:func:`metrics_summary`, :func:`load_series` and :func:`load_events`.
``docs/logging.md`` describes the design and the formats.
"""

from __future__ import annotations

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
from .seal import json_number
from .writer import SummaryWriter

__all__ = [
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
    "sparkline",
    "tag_sparkline",
]
