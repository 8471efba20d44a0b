"""Importing a module a stored value names, without running code from the wrong place.

Importing a module runs it. A stored value may name any module, so restoring
imports one only when it is:

- already imported (nothing runs);
- the user's own code: every part of its dotted name not imported yet is
  found (``importlib.util.find_spec``, which imports nothing but the parent
  packages, each checked before it is imported) in a file outside the
  standard library, every site-packages directory, memostore's own packages,
  the store and every directory remote (where whoever writes the remote
  could plant a module);
- a library module the registry names (``registry.py``), such as ``numpy``.

``*.__main__`` modules (scripts run on import) are never imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

from ..code.modules import TOOL_PACKAGES, is_user_module, under_library_root


class ImportRefused(Exception):
    """A module may not be imported to restore a value; the message says why.

    Attributes:
        fixable: whether listing the module as safe would be a sensible fix (not
            for a module found inside a store or remote, which may be planted).
    """

    def __init__(self, message: str, fixable: bool = True) -> None:
        super().__init__(message)
        self.fixable = fixable


def import_user_module(
    name: str, data_dirs: Callable[[], Iterable[Path]] = lambda: ()
) -> ModuleType:
    """Module *name*, imported if needed, when it is the user's own code.

    *data_dirs* gives the store and remote directories (asked only when a module
    has to be imported: finding them reads the store's config).

    Raises:
        ImportRefused: it is not the user's code, or lies where it may not be run.
        LookupError: no such module.
    """
    loaded = sys.modules.get(name)
    if loaded is not None:
        if not is_user_module(loaded):
            raise ImportRefused(f"{name} is not the user's own code")
        return loaded
    parts = name.split(".")
    if parts[-1] == "__main__" or parts[0] in TOOL_PACKAGES:
        raise ImportRefused(f"{name} is not the user's own code")
    dirs: list[Path] | None = None
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in sys.modules:
            continue
        try:
            # Parents are imported by now (checked below on an earlier round), so
            # find_spec runs nothing new.
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError) as exc:
            raise LookupError(f"cannot find module {prefix}: {exc}") from exc
        if spec is None:
            raise LookupError(f"no module named {prefix}")
        if dirs is None:
            dirs = [d.resolve() for d in data_dirs()]
        _check_location(prefix, spec, dirs)
        try:
            importlib.import_module(prefix)
        except Exception as exc:
            raise LookupError(f"cannot import {prefix}: {exc}") from exc
    module = sys.modules[name]
    if not is_user_module(module):
        raise ImportRefused(f"{name} is not the user's own code")
    return module


def import_library_module(name: str) -> ModuleType:
    """Module *name*, imported if needed (the caller checked the registry names it)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    if name.rsplit(".", 1)[-1] == "__main__":
        raise ImportRefused(f"{name} runs a script when imported")
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise LookupError(f"cannot import {name}: {exc}") from exc


def _check_location(name: str, spec: importlib.machinery.ModuleSpec, dirs: list[Path]) -> None:
    if spec.origin in ("built-in", "frozen"):
        raise ImportRefused(f"{name} is built into Python, not the user's code")
    if spec.has_location and spec.origin:
        places = [spec.origin]
    else:
        places = list(spec.submodule_search_locations or ())  # a namespace package
        if not places:
            raise ImportRefused(f"{name} has no file to judge it by")
    for place in places:
        if under_library_root(place):
            raise ImportRefused(f"{name} ({place}) is an installed package, not the user's code")
        path = Path(place).resolve()
        for data_dir in dirs:
            if path.is_relative_to(data_dir):
                raise ImportRefused(
                    f"{name} ({place}) lies inside {data_dir}, a store or remote: whoever "
                    "writes there could have put it there",
                    fixable=False,
                )
