"""``memostore.log``: logging a dict of metrics per step, without a writer object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import context, standalone
from . import convert
from .attach import journal_for
from .journal import Journal
from .writer_base import wall_time, warn_once


def log(
    values: Mapping[str, Any], step: int | None = None, *, walltime: float | None = None
) -> None:
    """Log several metrics of one step into the current evaluation.

    Numbers (and one-element tensors) become scalars, strings become text,
    larger arrays and tensors become histograms; nested mappings are flattened
    with ``/``. Without *step*, each call takes the step after the previous
    call's (0 first), so a loop of ``log({...})`` calls counts its own steps.

    Args:
        values: tag -> value.
        step: the step of every value, or None for the next one.
        walltime: seconds since the epoch; now by default.
    """
    try:
        journal = journal_for(context.current() or standalone.current_or_run())
        if step is None:
            step = journal.step_counter
        step = int(step)
        journal.step_counter = step + 1
        wall = wall_time(walltime)
        for tag, value in _flatten(values, ""):
            _log_one(journal, tag, value, step, wall)
    except Exception as exc:
        warn_once(("log", type(exc)), f"log dropped points ({type(exc).__name__}: {exc})")


def _flatten(values: Mapping[str, Any], prefix: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.extend(_flatten(value, tag + "/"))
        else:
            out.append((tag, value))
    return out


def _log_one(journal: Journal, tag: str, value: Any, step: int, wall: float) -> None:
    if isinstance(value, str):
        journal.add_event({"kind": "text", "tag": tag, "text": value, "step": step, "wall": wall})
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        journal.add_scalar(tag, step, float(value), wall)
        return
    array = convert.to_numpy(value)
    if array.size == 1:
        journal.add_scalar(tag, step, float(array.reshape(-1)[0]), wall)
    elif array.size > 1 and array.dtype.kind in "biuf":
        event = {"kind": "histogram", "tag": tag, "step": step, "wall": wall}
        event.update(convert.histogram(array))
        journal.add_event(event)
    else:
        raise TypeError(f"cannot log {type(value).__name__} as {tag!r}")
