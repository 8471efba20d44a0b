"""``memostore config``: the store's settings (``max-size``, ``gc-grace``).

Also prints, after any command that opened a store, the notice that an
automatic eviction in the background left there (see
:mod:`memostore.lifecycle.enforce`): the process that triggered it may be gone.
"""

from __future__ import annotations

from typing import Any

import click

from .output import Output, echo
from .state import State, get_state, pass_state


@click.command("config")
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--unset", "unset", is_flag=True, help="Remove the setting KEY.")
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@pass_state
def config(state: State, key: str | None, value: str | None, unset: bool, as_json: bool) -> None:
    """Show or change a store setting.

    \b
    memostore config                    every setting
    memostore config max-size 50G       keep the store under 50 GiB (evicts in the background)
    memostore config max-size           print it
    memostore config --unset max-size   no limit
    memostore config gc-grace 1h        grace period of automatic eviction

    Settings live in the store's config.json.
    """
    from memostore.lifecycle.settings import (
        SETTINGS,
        get_setting,
        set_setting,
        unset_setting,
    )

    out = Output()
    store = state.store
    if unset:
        if key is None or value is not None:
            raise click.UsageError("--unset takes one KEY: memostore config --unset max-size")
        was = unset_setting(store, key)
        if not as_json:
            out.line(f"{key}: unset" if was else f"{key} was not set")
        return
    if key is None:
        values = {k: get_setting(store, k) for k in sorted(SETTINGS)}
        if as_json:
            out.json(values)
            return
        for name, current in values.items():
            shown = SETTINGS[name].show(current) if current is not None else "(unset)"
            out.line(f"{name} = {shown}    # {SETTINGS[name].help}")
        return
    if value is not None:
        stored = set_setting(store, key, value)
        if as_json:
            out.json({key: stored})
        else:
            out.line(f"{key} = {SETTINGS[key].show(stored)}")
        return
    current = get_setting(store, key)
    if as_json:
        out.json({key: current})
    elif current is None:
        out.line(f"{key} is not set")
    else:
        out.line(SETTINGS[key].show(current))


def _print_notice(result: Any, **params: Any) -> Any:
    """After a command: the notice of an automatic eviction, once, on stderr."""
    state = get_state()
    store = getattr(state, "_store", None)  # only a store the command opened itself
    if store is not None:
        from memostore.lifecycle.enforce import take_notice

        notice = take_notice(store)
        if notice:
            echo(f"memostore: {notice}", err=True)
    return result


def register(group: click.Group) -> None:
    """Add ``config`` to *group* and print eviction notices after its commands."""
    group.add_command(config)
    previous = group._result_callback

    def after(result: Any, **params: Any) -> Any:
        if previous is not None:
            result = previous(result, **params)
        return _print_notice(result, **params)

    group._result_callback = after
