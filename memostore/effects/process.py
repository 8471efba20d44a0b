"""Process-wide settings that change what a body computes: part of the call key.

**Settings.** A library's process-wide settings can change what the same code
computes from the same arguments: ``torch.set_default_dtype(torch.float64)``
makes ``nn.Linear(4, 1)`` hold float64 weights; the float32 matmul precision
and the deterministic-algorithm flags change results. Codec packages register
such settings (:func:`register_setting`; ``torch_codecs`` registers torch's),
so the core never imports the library. A setting whose value differs from its
default is part of the call key (``keys.py``): with every setting at its
default, keys are what they were without settings.

What a body reads from outside (environment variables, files) is a hit
condition instead: ``reads.py``.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Setting",
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
