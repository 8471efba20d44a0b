"""``memostore plot`` and ``memostore export tensorboard``: viewing logged metrics."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import click

from memostore.errors import MemostoreError, printable

from .output import echo, echo_drawn
from .state import State, pass_state


def register(group: click.Group) -> None:
    """Add the metric commands (``plot``, ``export tensorboard``) to *group*."""
    group.add_command(plot)
    existing = group.commands.get("export")
    if isinstance(existing, click.Group):
        existing.add_command(export_tensorboard)
    else:
        group.add_command(export)


def _logs_of(state: State, rev: str) -> tuple[str, str, str]:
    """(evaluation id, function, logs id) of a revision; an error if it logged nothing."""
    from memostore.records.evaluation import Evaluation

    evaluation_id = state.resolve(rev)
    evaluation = Evaluation.load(state.store, evaluation_id)
    if not evaluation.logs_id:
        raise MemostoreError(
            f"evaluation {evaluation_id[:12]} ({evaluation.function}) logged no metrics; "
            "`memostore log` lists evaluations"
        )
    return evaluation_id, evaluation.function, evaluation.logs_id


def _short(function: str) -> str:
    return function.split(":", 1)[-1].rsplit(".", 1)[-1]


@click.command("plot")
@click.argument("revs", nargs=-1, required=True)
@click.option("--tag", "tags", multiple=True, required=True, help="Metric tag (repeatable).")
@click.option(
    "--smooth",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.0,
    show_default=True,
    help="TensorBoard's smoothing weight (debiased EMA), in [0, 1).",
)
@click.option(
    "--x",
    "x_mode",
    type=click.Choice(["step", "wall", "relative"]),
    default="step",
    show_default=True,
    help="Horizontal axis: step, wall-clock time, or time since each curve's first point.",
)
@click.option("--width", type=click.IntRange(20), default=None, help="Columns (default: terminal).")
@click.option("--height", type=click.IntRange(3), default=20, show_default=True, help="Rows.")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Redraw as new points arrive, until every running evaluation has ended (Ctrl-C stops).",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.05),
    default=0.5,
    show_default=True,
    help="With --follow: seconds between reads of the running evaluations.",
)
@pass_state
def plot(
    state: State,
    revs: tuple[str, ...],
    tags: tuple[str, ...],
    smooth: float,
    x_mode: str,
    width: int | None,
    height: int,
    follow: bool,
    interval: float,
) -> None:
    """Plot metric curves of one or more evaluations in the terminal.

    REV is an evaluation id, a unique prefix, or a function name (its newest
    evaluation), optionally NAME~N; an evaluation still running is plotted
    with the points logged so far. Every (REV, TAG) pair is one curve. With
    --follow the plot is redrawn whenever points arrive, reading only the new
    ones.
    """
    from memostore.metrics.follow import open_source
    from memostore.metrics.running import running_evaluations

    running = running_evaluations(state.store)
    sources = [(rev, open_source(state.store, rev, running)) for rev in revs]
    columns = width or shutil.get_terminal_size((100, 24)).columns
    tty = sys.stdout.isatty()
    color = tty and "NO_COLOR" not in os.environ

    def frame() -> str:
        return _render(sources, tags, smooth, x_mode, columns, height, color, follow)

    if not follow:
        echo_drawn(frame())
        return
    _follow(sources, frame, interval, tty)


def _render(
    sources: list[tuple[str, Any]],
    tags: tuple[str, ...],
    smooth: float,
    x_mode: str,
    width: int,
    height: int,
    color: bool,
    follow: bool,
) -> str:
    import numpy as np

    from memostore.metrics.plot import Curve, ema_smooth, render

    curves = []
    for rev, source in sources:
        for tag in tags:
            try:
                steps, values, walls = source.series(tag)
            except KeyError as exc:
                if not (follow and source.live):
                    raise MemostoreError(f"{rev}: {exc.args[0]}") from None
                steps, values, walls = (np.empty(0), np.empty(0), np.empty(0))
            except ValueError as exc:
                raise MemostoreError(f"{rev}: {exc}") from None
            if x_mode == "step":
                x = steps.astype(np.float64)
            elif x_mode == "wall":
                x = walls
            else:
                x = walls - walls[0] if len(walls) else walls
            y = ema_smooth(values, smooth) if smooth else values
            label = f"{_short(source.function)} {source.name[:8]}"
            if len(tags) > 1:
                label += f" {tag}"
            state = ", running" if source.live else ""
            # The frame holds the plot's own colours, so what records name is escaped here.
            curves.append(Curve(printable(f"{label}  ({len(values)} points{state})"), x, y))
    title = printable(", ".join(tags) + (f"  (smoothed {smooth:g})" if smooth else ""))
    return render(curves, width=width, height=height, x_mode=x_mode, color=color, title=title)


def _follow(sources: list[tuple[str, Any]], frame: Any, interval: float, tty: bool) -> None:
    """Redraw every *interval* seconds that brought points, until nothing runs or Ctrl-C."""
    shown = 0

    def emit(text: str) -> None:
        nonlocal shown
        if tty and shown:
            # Back to the first line of the previous frame, and clear from there.
            echo_drawn(f"\x1b[{shown}F\x1b[J", nl=False)
        elif shown:
            echo_drawn()  # piped: frames one after another, a blank line apart
        echo_drawn(text)
        shown = text.count("\n") + 1

    try:
        emit(frame())
        while any(source.live for _, source in sources):
            time.sleep(interval)
            changed = False
            for _, source in sources:
                was_live = source.live
                changed |= source.update()
                changed |= was_live and not source.live
            if changed:
                emit(frame())
    except KeyboardInterrupt:
        echo_drawn()  # stopped by the user: the last frame stays, the prompt goes below it
    for rev, source in sources:
        if source.outcome is not None:
            echo(f"{rev}: {_short(source.function)} {source.name[:8]} ended: {source.outcome}")


@click.group("export")
def export() -> None:
    """Export evaluations to other tools' formats."""


@export.command("tensorboard")
@click.argument("revs", nargs=-1, required=True)
@click.option(
    "--logdir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write runs into (one sub-directory per evaluation).",
)
@pass_state
def export_tensorboard(state: State, revs: tuple[str, ...], logdir: Path) -> None:
    """Write TensorBoard event files for evaluations' logs (one run each).

    Scalars, histograms, images, text and hyper-parameters go into the same
    run directory. Needs the tensorboard package (the tensorboard extra).
    """
    from memostore.metrics import tb_export

    tb_export.require_tensorboard()  # fail early, with the install hint, before resolving anything
    ids = [_logs_of(state, rev)[0] for rev in revs]
    for run_dir in tb_export.export_tensorboard(state.store, ids, logdir):
        echo(str(run_dir))
    echo(f"view with: tensorboard --logdir {logdir}", err=True)
