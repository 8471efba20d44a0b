"""``memostore ui``: serve the read-only dashboard over the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .output import warn
from .state import State, pass_state


def register(group: click.Group) -> None:
    """Add ``ui`` to *group*."""
    group.add_command(ui)


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@pass_state
def ui(state: State, host: str, port: int) -> None:
    """Serve a read-only dashboard of the store in the browser.

    Prints the URL it serves on its first line, then serves until interrupted
    (Ctrl-C). Pages: the runs table with charts of the selected runs, one
    evaluation, the diff of two, the lineage graph. With no store there yet,
    it serves a page saying how to log a first run, and shows the store once
    it appears. It needs the 'ui' extra.
    """
    from memostore.ui import INSTALL_HINT, missing_requirements

    missing = missing_requirements()
    if missing:
        raise click.ClickException(
            f"memostore ui needs {', '.join(missing)}: install them with {INSTALL_HINT}"
        )
    from memostore.errors import StoreNotFound
    from memostore.odb.store import default_store_path

    try:
        store: Any = state.store
    except StoreNotFound:
        # Served anyway, as TensorBoard serves an empty log directory: the page says
        # how to log a first run, and shows the store as soon as one appears there.
        store = state.store_path or default_store_path(create=False)
        store = Path(store).expanduser().absolute()
    if host not in ("127.0.0.1", "localhost", "::1"):
        warn(
            f"serving on {host}: anyone who can reach this address can read the store "
            "(the default, 127.0.0.1, serves this machine only)"
        )
    from memostore.ui.server import serve

    try:
        serve(store, host=host, port=port)
    except OSError as exc:
        reason = exc.strerror or exc
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    except KeyboardInterrupt:
        pass
