"""The ``memostore`` command: entry point, global options and error handling.

Exit status: 0 ok; 1 an expected error (a :class:`MemostoreError`: unknown
revision, no store, corrupt object, ...) reported as one line naming the fix,
or a check that found problems (``fsck``); 2 a usage error.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from memostore import __version__
from memostore.errors import MemostoreError, printable

from .state import State

# Optional command modules, each exposing ``register(group)``; absent ones are skipped.
_PLUGIN_MODULES = (
    "metrics_cmds",
    "remote_cmds",
    "ui_cmd",
    "config_cmds",
    "lifecycle_cmds",
    "trust_cmds",
)


def one_line(text: str) -> str:
    """*text* on one line (messages may embed newlines; the contract is one line)."""
    return " ".join(str(text).split())


class MemostoreGroup(click.Group):
    """A group that turns expected errors into one-line messages with exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemostoreError as exc:
            raise click.ClickException(one_line(str(exc))) from None
        except click.ClickException as exc:
            # A command's own message may quote what a record holds.
            exc.message = printable(exc.message)
            raise
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
            reason = exc.strerror or str(exc)
            raise click.ClickException(one_line(f"{reason}{where}")) from None


@click.group(cls=MemostoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_path",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Store directory (default: $MEMOSTORE_DIR, else the nearest .memostore/ upward).",
)
@click.version_option(__version__, prog_name="memostore")
@click.pass_context
def cli(ctx: click.Context, store_path: Path | None) -> None:
    """Inspect and maintain a memostore store."""
    ctx.obj = State(store_path)


def _register_commands(group: click.Group) -> None:
    from .diff_cmd import diff
    from .log_cmd import log
    from .maintenance_cmds import fsck, gc
    from .show_cmd import show

    for command in (log, show, diff, gc, fsck):
        group.add_command(command)
    for name in _PLUGIN_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue  # that part of the CLI is not installed
            raise
        module.register(group)


_register_commands(cli)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="memostore")
    except BrokenPipeError:
        # The reader went away (``memostore log | head``): stop quietly, and keep
        # Python from complaining again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
