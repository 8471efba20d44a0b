"""Which modules are the user's own code, and how everything else is pinned.

User code is hashed by content. Everything else is pinned coarsely: an
installed third-party package by the name and version of the distribution
that owns its top-level import name, the standard library and builtins by
the Python implementation and minor version.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import os
import site
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import blake3

__all__ = [
    "PYTHON_SYMBOL",
    "distribution_pin",
    "find_module_file",
    "is_user_module",
    "is_user_module_name",
    "names_of",
    "python_digest",
]

PYTHON_SYMBOL = "python"

# This tool's own packages are pinned like any installed package, even when
# they run from a source checkout.
TOOL_PACKAGES = frozenset({"memostore", "memostore_cli", "torch_codecs"})

STDLIB_NAMES = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names)

# (module name, file) -> verdict. Modules do not move once imported.
_verdicts: dict[tuple[str, str | None], bool] = {}


@functools.cache
def library_roots() -> tuple[Path, ...]:
    """Directories holding the standard library and installed packages.

    The interpreter's own, and every entry of ``sys.path`` that holds installed
    distributions (``*.dist-info``): packages a ``.pth`` file or ``PYTHONPATH``
    adds from a shared environment are installed packages too, pinned by version.
    """
    base_vars = {
        "base": sys.base_prefix,
        "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix,
        "installed_platbase": sys.base_exec_prefix,
    }
    candidates: list[str] = []
    for paths in (sysconfig.get_paths(), sysconfig.get_paths(vars=base_vars)):
        candidates += [paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates.append(os.path.dirname(os.__file__))
    if hasattr(site, "getsitepackages"):
        candidates += site.getsitepackages()
    with contextlib.suppress(Exception):  # a stripped-down site module: the others still count
        candidates.append(site.getusersitepackages())
    # Directories a .pth file put on the path that packages were installed into (a
    # layered environment: a venv reusing another's site-packages) hold distribution
    # metadata, as every installation target does. Never the user's own directories:
    # a project that happens to hold a ``*.dist-info`` keeps its code as user code.
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    user_dirs = [Path.cwd(), *([Path(main_file).resolve().parent] if main_file else [])]
    for entry in sys.path:
        if entry and _holds_distributions(entry):
            resolved = Path(entry).resolve()
            if not any(d.is_relative_to(resolved) for d in user_dirs):
                candidates.append(entry)
    roots: set[Path] = set()
    for candidate in candidates:
        if candidate:
            path = Path(candidate).resolve()
            # A root that contains the file system root or the working directory
            # would swallow the user's project; such a layout is not a library dir.
            if path.parent != path:
                roots.add(path)
    return tuple(sorted(roots))


def _holds_distributions(entry: str) -> bool:
    try:
        with os.scandir(entry) as children:
            return any(child.name.endswith(".dist-info") for child in children)
    except OSError:
        return False


def under_library_root(file: str) -> bool:
    try:
        path = Path(file).resolve()
    except (OSError, RuntimeError):
        return False
    return any(path.is_relative_to(root) for root in library_roots())


def names_of(obj: Any) -> tuple[str, str]:
    """(module, qualname) a function or class is known by; ValueError if it has none."""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if module is None:
        owner = getattr(obj, "__objclass__", None) or getattr(obj, "__self__", None)
        owner_type = owner if isinstance(owner, type) else type(owner)
        module = getattr(owner_type, "__module__", None) or "builtins"
    if not qualname or not isinstance(qualname, str) or not isinstance(module, str):
        raise ValueError(f"{obj!r} has no module and qualified name")
    return module, qualname


def is_user_module(module: ModuleType | str) -> bool:
    """Whether *module* is the user's own code.

    User code is ``__main__``, any module without a file (a notebook cell,
    ``<stdin>``), and any module whose file lies outside the standard
    library and every site-packages directory, so an editable install of
    the user's project counts. The standard library, installed third-party
    packages and memostore's own packages do not.

    Args:
        module: A module object or a module name (looked up in ``sys.modules``;
            a name not imported yet is judged by where its file would be found).

    Returns:
        True for the user's code, False for the standard library and installed packages.
    """
    if isinstance(module, str):
        loaded = sys.modules.get(module)
        if loaded is None:
            return is_user_module_name(module)
        module = loaded
    name = getattr(module, "__name__", None)
    if not isinstance(name, str):
        return True
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        file = None
    key = (name, file)
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = _judge(module, name, file)
        _verdicts[key] = verdict
    return verdict


def _judge(module: ModuleType, name: str, file: str | None) -> bool:
    if name == "__main__":
        return True
    top = name.partition(".")[0]
    if top in TOOL_PACKAGES:
        return False
    if file is not None:
        return not under_library_root(file)
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None)
    if origin in ("built-in", "frozen") or top in STDLIB_NAMES:
        return False
    # A namespace package has no file but has search locations.
    locations = list(getattr(module, "__path__", None) or ())
    if locations:
        return not all(under_library_root(str(loc)) for loc in locations)
    return True


def is_user_module_name(name: str) -> bool:
    """Judge a module that is not imported, by where its file would be found."""
    top = name.partition(".")[0]
    if name == "__main__":
        return True
    if top in TOOL_PACKAGES or top in STDLIB_NAMES:
        return False
    file = find_module_file(name)
    if file is None:
        return top not in distributions_by_package()
    return not under_library_root(file)


def find_module_file(name: str) -> str | None:
    """The source file of module *name* without importing it (or its parents)."""
    parts = name.split(".")
    search: list[str] | None = None
    for i in range(len(parts)):
        fullname = ".".join(parts[: i + 1])
        loaded = sys.modules.get(fullname)
        if loaded is not None:
            if i == len(parts) - 1:
                file = getattr(loaded, "__file__", None)
                return file if isinstance(file, str) else None
            search = list(getattr(loaded, "__path__", None) or ())
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if i == len(parts) - 1:
            return spec.origin if spec.has_location else None
        search = list(spec.submodule_search_locations or ())
    return None


@functools.cache
def distributions_by_package() -> dict[str, tuple[str, ...]]:
    import importlib.metadata  # ~20 ms: only when a third-party module is pinned

    mapping = importlib.metadata.packages_distributions()
    return {top: tuple(sorted(set(names))) for top, names in mapping.items()}


def _owners(top: str) -> tuple[str, ...]:
    """Distributions providing the top-level import name *top*.

    A distribution named like the import name (``torch``, ``numpy``) is taken
    at once; only other names (``PIL`` -> Pillow, ``yaml`` -> PyYAML) pay for
    ``packages_distributions()``, which reads every installed distribution's
    file list.
    """
    import importlib.metadata  # ~20 ms: imported on first use, not with memostore

    try:
        dist = importlib.metadata.distribution(top)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return distributions_by_package().get(top, ())
    name = dist.metadata["Name"]
    return (name,) if name else distributions_by_package().get(top, ())


@functools.cache
def distribution_pin(module_name: str) -> tuple[str, str]:
    """The ``dist:NAME`` symbol and digest pinning a third-party module.

    The digest is blake3 of ``"NAME==VERSION"`` for the distribution that owns
    the module's top-level import name. Several owners (a namespace package)
    are joined with commas; a module that no distribution owns is pinned by
    its top-level name and its ``__version__`` (or ``unknown``).
    """
    import importlib.metadata

    top = module_name.partition(".")[0]
    owners = _owners(top)
    pins: list[str] = []
    for owner in owners:
        try:
            pins.append(f"{owner}=={importlib.metadata.version(owner)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(f"{owner}==unknown")
    if not pins:
        owners = (top,)
        version = getattr(sys.modules.get(top), "__version__", None)
        pins.append(f"{top}=={version if isinstance(version, str) else 'unknown'}")
    symbol = "dist:" + ",".join(owners)
    return symbol, blake3.blake3(",".join(pins).encode()).hexdigest()


@functools.cache
def python_digest() -> str:
    """Digest pinning the standard library and builtins: implementation and minor version."""
    major, minor = sys.version_info[:2]
    return blake3.blake3(f"{sys.implementation.name}-{major}.{minor}".encode()).hexdigest()


def is_stdlib_name(module_name: str) -> bool:
    """Whether *module_name* belongs to the standard library or the builtins."""
    return module_name.partition(".")[0] in STDLIB_NAMES


def module_of(obj: Any) -> str | None:
    """The name of the module that defines *obj* (a function, class or builtin)."""
    name = getattr(obj, "__module__", None)
    if isinstance(name, str):
        return name
    owner = getattr(obj, "__objclass__", None) or getattr(obj, "__self__", None)
    if isinstance(owner, ModuleType):
        return owner.__name__
    if owner is not None:
        owner_type = owner if isinstance(owner, type) else type(owner)
        name = getattr(owner_type, "__module__", None)
        if isinstance(name, str):
            return name
    return None
