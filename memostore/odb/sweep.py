"""Sweeping what killed writers leave behind: temp files, lock companions, staging dirs.

Used by :func:`memostore.lifecycle.maintenance.gc`. Each helper deletes only what is
older than a cut-off (a writer may still be using anything younger) and never
follows a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from .checkouts import leftovers as checkout_leftovers


def remove_lock_leftovers(refs_dir: Path, older_than: float, dry_run: bool) -> tuple[int, int]:
    """Delete what killed ref writers left beside refs (``*.lock.new``, ``*.lock.stale-*``,
    hidden temp files), once older than the grace period. Live ``*.lock`` files are
    left to the lock protocol, which breaks them when their holder is gone."""
    count = size = 0
    for dirpath, _dirnames, filenames in os.walk(refs_dir):
        leftovers = [f for f in filenames if ".lock." in f or f.startswith(".")]
        if leftovers:
            n, s = remove_old_files(Path(dirpath), older_than, dry_run, set(leftovers).__contains__)
            count, size = count + n, size + s
    return count, size


def remove_checkout_leftovers(
    checkouts_dir: Path, older_than: float, dry_run: bool
) -> tuple[int, int]:
    """Delete staging directories and stale checkouts that killed restores left behind."""
    count = size = 0
    for path in checkout_leftovers(checkouts_dir):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if st.st_mtime >= older_than:
            continue  # a restore may be laying it out right now
        if not stat.S_ISDIR(st.st_mode):  # not a directory a restore made: never followed
            if not dry_run:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            count += 1
            continue
        for dirpath, _dirnames, filenames in os.walk(path):
            for filename in filenames:
                with contextlib.suppress(OSError):
                    size += os.lstat(os.path.join(dirpath, filename)).st_size
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        count += 1
    return count, size


def is_hidden(name: str) -> bool:
    return name.startswith(".")


def remove_old_files(
    directory: Path,
    older_than: float,
    dry_run: bool,
    only: Callable[[str], bool] | None = None,
) -> tuple[int, int]:
    """Delete regular files in *directory* last modified before *older_than*
    (only those whose names *only* accepts, when given)."""
    count = size = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0, 0
    for entry in entries:
        if only is not None and not only(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not entry.is_file(follow_symlinks=False) or st.st_mtime >= older_than:
            continue
        if not dry_run:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
        count += 1
        size += st.st_size
    return count, size
