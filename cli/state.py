"""Per-invocation state shared by commands: the store (opened on first use) and the output.

Command modules (including plug-ins such as ``metrics_cmds``) get at it with
:func:`get_state` or the :func:`pass_state` decorator, and resolve revisions
with :meth:`State.resolve`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from memostore.odb.store import Store

F = TypeVar("F", bound=Callable[..., Any])


class State:
    """What the ``memostore`` group passes to its commands.

    Attributes:
        store_path: ``--store PATH`` when given, else None (the default store).
    """

    def __init__(self, store_path: Path | None) -> None:
        self.store_path = store_path
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store, opened on first use; never created by a read command.

        Raises:
            StoreNotFound: there is no store there (the message says how to fix it).
        """
        if self._store is None:
            if self.store_path is not None:
                self._store = Store(self.store_path, create=False)
            else:
                self._store = Store.default(create=False)
        return self._store

    def resolve(self, rev: str) -> str:
        """The evaluation id *rev* names (see :mod:`memostore.odb.revisions`)."""
        from memostore.odb.revisions import resolve_revision

        return resolve_revision(self.store, rev)


def get_state() -> State:
    """The state of the running ``memostore`` invocation."""
    ctx = click.get_current_context()
    state = ctx.find_object(State)
    if state is None:  # a command invoked on its own (tests): the default store
        state = State(None)
        ctx.obj = state
    return state


def pass_state(fn: F) -> F:
    """Decorator: call the command with the :class:`State` as its first argument."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(get_state(), *args, **kwargs)

    return wrapper  # type: ignore[return-value]
