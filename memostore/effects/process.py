"""What a body reads from the process: global settings (keyed) and environment variables.

**Settings.** A library's process-wide settings can change what the same code
computes from the same arguments: ``torch.set_default_dtype(torch.float64)``
makes ``nn.Linear(4, 1)`` hold float64 weights; the float32 matmul precision
and the deterministic-algorithm flags change results. Codec packages register
such settings (:func:`register_setting`; ``torch_codecs`` registers torch's),
so the core never imports the library. A setting whose value differs from its
default is part of the call key (``keys.py``): with every setting at its
default, keys are what they were without settings.

**Environment variables.** A body that reads ``os.environ["HIDDEN"]``
(``os.getenv``, ``os.environ.get``, ``"X" in os.environ``) computes from it. A
miss records each variable the user's code read (not reads made inside
libraries) with the value it had, or None if unset; a stored evaluation
answers a call only while every recorded variable has that value
(``hits.py``). Reads are seen by wrapping ``os.environ``'s item lookup once,
when the first body starts; outside a memoised body the wrapper costs one
list check. A hit inside a running body adds the variables its evaluation read
to that body's, as if it had run.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..code.modules import is_user_module

__all__ = [
    "Setting",
    "begin_environ",
    "current_environ",
    "end_environ",
    "note_environ",
    "register_setting",
    "settings",
]


@dataclass(frozen=True)
class Setting:
    """A process-wide setting that changes results.

    Attributes:
        name: its name in keys and records (``"torch.default_dtype"``).
        read: returns its value now, as JSON (str, int, float, bool or None).
        default: the value a fresh process has; it is left out of the key.
    """

    name: str
    read: Callable[[], Any]
    default: Any


_settings: dict[str, Setting] = {}
# The registered readers and their defaults, in one order: read in one C-level pass.
_readers: list[Callable[[], Any]] = []
_defaults: list[Any] = []
_call = getattr(operator, "call", lambda f: f())  # operator.call is 3.11+


def register_setting(name: str, read: Callable[[], Any], default: Any) -> None:
    """Key every memoised call by this setting whenever it differs from *default*."""
    _settings[name] = Setting(name, read, default)
    _readers[:] = [s.read for s in _settings.values()]
    _defaults[:] = [s.default for s in _settings.values()]


def settings() -> dict[str, Any]:
    """The registered settings that differ from their defaults now, by name."""
    if not _readers:
        if "torch" not in sys.modules:
            return {}
        # torch is in use: its codec package registers its settings (loaded lazily
        # otherwise, by the first torch value met, which may come too late).
        from ..values.codecs import registry

        registry.load_entry_points()
        if not _readers:
            return {}
    try:
        if list(map(_call, _readers)) == _defaults:
            return {}  # the usual case: every setting at its default
    except Exception:
        pass  # one that cannot be read now: read them one by one below
    out: dict[str, Any] = {}
    for setting in list(_settings.values()):
        try:
            value = setting.read()
        except Exception:
            continue  # a setting that cannot be read now (a backend not built in)
        if value != setting.default:
            out[setting.name] = value
    return out


# -- environment variables --------------------------------------------------------------------
_local = threading.local()
_install_lock = threading.Lock()
_environ_class = type(os.environ)
_lookup = _environ_class.__getitem__
# Frames of the lookups themselves, skipped to find who asked.
# (``Mapping.get`` runs with ``__name__`` "collections.abc".)
_LOOKUP_MODULES = frozenset({"os", "_collections_abc", "collections.abc"})


def _frames() -> list[dict[str, str | None]]:
    frames = getattr(_local, "frames", None)
    if frames is None:
        frames = _local.frames = []
    return frames


def _asked_by_user() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _LOOKUP_MODULES:
        frame = frame.f_back
    if frame is None:
        return False
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and is_user_module(name)


def _recording_lookup(self: Any, key: Any) -> Any:
    frames = getattr(_local, "frames", None)
    if not frames or self is not os.environ or type(key) is not str:
        return _lookup(self, key)
    try:
        value = _lookup(self, key)
    except KeyError:
        if _asked_by_user():
            for frame in frames:
                frame.setdefault(key, None)
        raise
    if _asked_by_user():
        for frame in frames:
            frame.setdefault(key, value)
    return value


def _install() -> None:
    with _install_lock:
        if _environ_class.__getitem__ is not _recording_lookup:
            _environ_class.__getitem__ = _recording_lookup  # type: ignore[method-assign]


def begin_environ() -> dict[str, str | None]:
    """Start recording the environment variables a body reads (returns its record)."""
    _install()
    frame: dict[str, str | None] = {}
    _frames().append(frame)
    return frame


def end_environ(frame: dict[str, str | None]) -> dict[str, str | None]:
    """Stop recording *frame*; the variables read, by name, with their values."""
    frames = _frames()
    for i in range(len(frames) - 1, -1, -1):
        if frames[i] is frame:  # by identity: two frames may hold equal records
            del frames[i]
            break
    return dict(sorted(frame.items()))


def note_environ(read: Mapping[str, Any] | None) -> None:
    """A hit inside running bodies: they depend on what its evaluation read, too."""
    frames = getattr(_local, "frames", None)
    if frames and read:
        for frame in frames:
            for name, value in read.items():
                frame.setdefault(name, value)


def current_environ(names: Iterable[str]) -> dict[str, str | None]:
    """The value of each named variable now (None if unset), without recording the read."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = _lookup(os.environ, name)
        except KeyError:
            out[name] = None
    return out


def environ_differs(body: Mapping[str, Any]) -> list[str]:
    """The environment variables a stored body read that hold another value now."""
    recorded = body.get("environ")
    if not recorded:
        return []
    now = current_environ(recorded)
    return [name for name, value in recorded.items() if now.get(name) != value]
