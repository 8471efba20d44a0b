"""``memostore plot`` and ``memostore export tensorboard``: viewing logged metrics."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add the metric commands (``plot``, ``export tensorboard``) to *group*."""
    group.add_command(plot)


@click.command("plot")
@click.argument("revs", nargs=-1, required=True)
@click.option("--tag", "tags", multiple=True, required=True, help="Metric tag to plot.")
def plot(revs: tuple[str, ...], tags: tuple[str, ...]) -> None:
    """Plot metric curves of evaluations in the terminal."""
    raise click.ClickException("plot is not available yet")
