"""Store settings kept in ``config.json``: the size limit and eviction's grace period.

``memostore config KEY [VALUE]`` reads and writes them. They live under the
``"settings"`` member of the store's config file, as plain JSON numbers
(bytes, seconds), so that another version of memostore reads them unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb.lockfile import LockFile

if TYPE_CHECKING:
    from ..odb.store import Store

SECTION = "settings"

# Sizes are binary multiples, as du -h prints them: 1K = 1024 bytes.
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``500M``, ``50G``, ``1.5T`` (also ``50GB``, ``50GiB``).

    Raises:
        ValueError: *text* is not a size.
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 500M, 50G, or a number of bytes)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def format_size(n: int) -> str:
    """The shortest exact spelling of *n* bytes that :func:`parse_size` reads back."""
    for unit in ("T", "G", "M", "K"):
        scale = _SIZE_UNITS[unit.lower()]
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``30m``, ``1h``, ``2d``.

    Raises:
        ValueError: *text* is not a duration.
    """
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 3600, 30m, 1h, 2d)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    for unit in ("d", "h", "m"):
        scale = _DURATION_UNITS[unit]
        if seconds >= scale and seconds % scale == 0:
            return f"{int(seconds // scale)}{unit}"
    return f"{seconds:g}"


@dataclass(frozen=True)
class Setting:
    """One key: how its text is read and shown, and what it does."""

    parse: Callable[[str], Any]
    show: Callable[[Any], str]
    help: str


SETTINGS: dict[str, Setting] = {
    "max-size": Setting(
        parse_size,
        format_size,
        "evict least recently used evaluations, in the background, once the store's "
        "objects pass this size (e.g. 50G)",
    ),
    "gc-grace": Setting(
        parse_duration,
        format_duration,
        "automatic eviction keeps evaluations and objects younger than this "
        "(default 1h, as gc --grace)",
    ),
}


def _check_key(key: str) -> Setting:
    setting = SETTINGS.get(key)
    if setting is None:
        known = ", ".join(sorted(SETTINGS))
        raise MemostoreError(f"unknown setting {key!r}; the settings are: {known}")
    return setting


def read_settings(store: Store) -> dict[str, Any]:
    """Every setting the store's config holds (key -> JSON value)."""
    section = store.read_config().get(SECTION)
    if section is None:
        return {}
    if not isinstance(section, dict):
        where = store.config_path or "config.json"
        raise MemostoreError(f"{where}: {SECTION!r} must be a JSON object; fix or remove it")
    return section


def get_setting(store: Store, key: str) -> Any:
    """The value of *key* (bytes for max-size, seconds for gc-grace), or None when unset.

    Raises:
        MemostoreError: unknown key, or a stored value of the wrong type.
    """
    _check_key(key)
    value = read_settings(store).get(key)
    if value is not None and (type(value) not in (int, float) or value < 0):
        where = store.config_path or "config.json"
        raise MemostoreError(
            f"{where}: setting {key!r} holds {value!r}, not a number; run "
            f"`memostore config {key} VALUE` or `memostore config --unset {key}`"
        )
    return value


def set_setting(store: Store, key: str, text: str) -> Any:
    """Parse *text* for *key*, store it, and return the stored value.

    Raises:
        MemostoreError: unknown key or a value that does not parse.
    """
    setting = _check_key(key)
    try:
        value = setting.parse(text)
    except ValueError as exc:
        raise MemostoreError(f"setting {key}: {exc}") from None
    _update(store, lambda section: section.__setitem__(key, value))
    return value


def unset_setting(store: Store, key: str) -> bool:
    """Remove *key*; return whether it was set."""
    _check_key(key)
    was: list[bool] = []
    _update(store, lambda section: was.append(section.pop(key, None) is not None))
    return bool(was and was[0])


def _update(store: Store, change: Callable[[dict[str, Any]], None]) -> None:
    """Read-modify-write the settings under the config's lock (remotes share the file)."""

    def apply() -> None:
        config = store.read_config()
        section = config.setdefault(SECTION, {})
        if not isinstance(section, dict):
            raise MemostoreError(
                f"{store.config_path}: {SECTION!r} must be a JSON object; fix or remove it"
            )
        change(section)
        if not section:
            del config[SECTION]
        store.write_config(config)

    if store.config_path is None:
        apply()
        return
    with LockFile(store.config_path):
        apply()
