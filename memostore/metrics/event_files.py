"""Event files beside the store: the original writer, written through.

By default memostore's ``SummaryWriter`` writes no event files: the store
holds every point, and ``memostore export tensorboard`` writes event files
when they are wanted. ``SummaryWriter(event_files=True)`` (or
``MEMOSTORE_EVENT_FILES=1`` in the environment) also writes them into
``log_dir`` as the writer it replaces would, by passing every call to that
writer first, for TensorBoard watching a run live and for code that reads
the event files. Which writer: ``"torch"`` (``torch.utils.tensorboard``, which
needs the tensorboard package), ``"tensorboardX"``, or ``True`` for the
first of them installed. That writer then decides what is refused: it raises
before anything is stored, and memostore's own copy of a point it accepted
never raises (a failure to store warns).

This costs what the original writer costs (about 30 µs an ``add_scalar``
for torch's, against 1 µs for the store alone).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

from ..errors import MemostoreError, install_hint, warn

ENV = "MEMOSTORE_EVENT_FILES"
BACKENDS = {"torch": "torch.utils.tensorboard.writer", "tensorboardx": "tensorboardX.writer"}
_OFF = {"", "0", "false", "no", "off"}
_ON = {"1", "true", "yes", "on"}
# Methods that pass their own arguments to the original (their names differ there).
NOT_WRAPPED = frozenset({"add_hparams"})


def choose(event_files: bool | str | None) -> str | None:
    """The backend *event_files* asks for (``torch``, ``tensorboardx``) or None for none.

    None reads ``MEMOSTORE_EVENT_FILES``; a value there that names nothing
    warns and writes no event files, an argument that names nothing raises.

    Raises:
        ValueError: *event_files* is a string that names no backend.
        MemostoreError: event files are asked for and neither library is installed.
    """
    from_env = event_files is None
    value: Any = os.environ.get(ENV, "") if from_env else event_files
    if value is False or value is True:
        value = "1" if value else "0"
    text = str(value).strip().lower()
    if text in _OFF:
        return None
    if text in _ON:
        return _first_installed(from_env)
    if text in BACKENDS:
        return text
    message = f"event_files={value!r} names no writer: use True, 'torch' or 'tensorboardX'"
    if from_env:
        warn(f"{ENV}: {message}")
        return None
    raise ValueError(message)


def _first_installed(from_env: bool) -> str | None:
    if importlib.util.find_spec("tensorboard") is not None:
        return "torch"
    if importlib.util.find_spec("tensorboardX") is not None:
        return "tensorboardx"
    message = (
        "writing event files needs the tensorboard or tensorboardX package "
        f"({install_hint('tensorboard')})"
    )
    if from_env:
        warn(f"{message}; none are written")
        return None
    raise MemostoreError(message)


def open_writer(backend: str, log_dir: Any, settings: dict[str, Any]) -> Any:
    """The original library's ``SummaryWriter`` on *log_dir*, made with *settings*."""
    cls = importlib.import_module(BACKENDS[backend]).SummaryWriter
    accepted = inspect.signature(cls).parameters
    kwargs = {k: v for k, v in settings.items() if k in accepted and v is not None}
    if backend == "tensorboardx":
        return cls(logdir=log_dir, **kwargs)
    return cls(log_dir=log_dir, **kwargs)


@functools.cache
def _parameters(cls: type, name: str) -> frozenset[str] | None:
    method = getattr(cls, name, None)
    if method is None:
        return None
    params = inspect.signature(method).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None  # takes anything
    return frozenset(params)


def call(tee: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Call *tee*'s method *name*, leaving out keywords it does not take.

    tensorboardX's ``display_name`` reaches torch's writer only if it takes it.
    """
    accepted = _parameters(type(tee), name)
    if accepted is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    getattr(tee, name)(*args, **kwargs)


_inside = threading.local()  # ids of the writers whose written-through call is running here


def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """*method* that first passes its call to the writer's event-file twin, if it has one.

    A call made from inside another (``add_custom_scalars_marginchart`` calls
    ``add_custom_scalars``) is passed on once, by the outer call.
    """

    @functools.wraps(method)
    def written_through(self: Any, *args: Any, **kwargs: Any) -> Any:
        tee = self._tee
        active = getattr(_inside, "writers", None)
        if active is None:
            active = _inside.writers = set()
        if tee is None or id(self) in active:
            return method(self, *args, **kwargs)  # a call from inside another one
        active.add(id(self))
        try:
            call(tee, name, args, kwargs)  # raises what the original raises
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                # The original took the point: memostore's copy must not break the caller.
                self._failed(name, exc)
                return None
        finally:
            active.discard(id(self))

    return written_through


def wrap_instance(writer: Any) -> None:
    """Make every ``add_*`` method of *writer* write through to its event-file twin.

    Bound on the instance, so a writer without event files pays nothing per point.
    """
    cls = type(writer)
    for name in dir(cls):
        if name.startswith("add_") and name not in NOT_WRAPPED:
            method = getattr(cls, name)
            if callable(method):
                setattr(writer, name, wrap(name, method).__get__(writer, cls))


__all__ = ["BACKENDS", "ENV", "call", "choose", "open_writer", "wrap", "wrap_instance"]
