"""Where and how an evaluation ran: host, interpreter, packages, the user's git state."""

from __future__ import annotations

import os
import platform
import socket
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

# Distributions whose versions every record carries (when installed).
_ALWAYS = ("memostore", "torch", "numpy")


@lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
    }


@lru_cache(maxsize=256)
def distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    versions: dict[str, str] = {}
    for name in (*_ALWAYS, *extra):
        version = distribution_version(name)
        if version is not None:
            versions[name] = version
    return dict(sorted(versions.items()))


def git_state(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Commit, branch and dirty flag of the git repository holding *path*.

    Returns empty fields, never an error, outside a repository or without pygit2
    (the optional ``git`` extra: imported here, on first use, only).
    Untracked files do not make a tree dirty (only changes to tracked files do).
    """
    empty: dict[str, Any] = {"commit": None, "branch": None, "dirty": None, "root": None}
    try:
        import pygit2
    except ImportError:
        return empty
    start = str(path if path is not None else os.getcwd())
    try:
        found = pygit2.discover_repository(start)
        if not found:
            return empty
        repo = pygit2.Repository(found)
        if repo.is_bare or repo.head_is_unborn:
            return {**empty, "root": repo.workdir}
        commit = str(repo.head.target)
        branch = None if repo.head_is_detached else repo.head.shorthand
        status = repo.status(untracked_files="no")
        ignored = getattr(pygit2, "GIT_STATUS_IGNORED", 1 << 14)
        dirty = any(flags & ~ignored for flags in status.values())
        return {"commit": commit, "branch": branch, "dirty": dirty, "root": repo.workdir}
    except Exception:  # provenance must never break the user's call
        return empty


def provenance(code_file: str | None, distributions: tuple[str, ...] = ()) -> dict[str, Any]:
    """The provenance record of one evaluation."""
    where = Path(code_file).parent if code_file else None
    return {
        **_static(),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "packages": package_versions(distributions),
        "git": git_state(where),
    }
