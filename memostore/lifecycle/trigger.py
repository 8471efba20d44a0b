"""The trigger of automatic eviction: after a stored miss, start the enforcer when due.

:func:`after_store` runs on the caller's path (``recording.store_result``), so
it does almost nothing: a monotonic-clock comparison, and at most once a
minute per process and store a look at the ``max-size`` setting. When a limit
is set and no process of this store looked within the last minute (the mtime
of ``logs/evict.check``), it starts ``python -m memostore.lifecycle.enforce
--store ROOT`` detached and returns without waiting: the measuring and the
eviction happen there (:mod:`memostore.lifecycle.enforce`). At a later check,
a process whose enforcer evicted something gets a
:class:`~memostore.errors.MemostoreWarning` saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import warn

if TYPE_CHECKING:
    from ..odb.store import Store

CHECK_INTERVAL_S = 60.0
LOGS_DIRNAME = "logs"
LOG_NAME = "evict.log"
NOTICE_NAME = "evict.notice"
_CHECK_NAME = "evict.check"
_TAIL_BYTES = 16 << 10

# store root -> monotonic time of this process's last check (and wall time, for warnings).
_checked: dict[Path, tuple[float, float]] = {}
_lock = threading.Lock()
# Enforcers this process started and has not seen exit: kept so that each is reaped
# (no zombie) and none is garbage-collected while running (a ResourceWarning).
_children: list[subprocess.Popen[bytes]] = []


def after_store(store: Store) -> None:
    """Start background enforcement of the store's size limit if one is due (never raises)."""
    root = store.root
    if root is None:
        return
    now = time.monotonic()
    last = _checked.get(root)
    if last is not None and now - last[0] < CHECK_INTERVAL_S:
        return
    with _lock:
        last = _checked.get(root)
        if last is not None and now - last[0] < CHECK_INTERVAL_S:
            return
        _checked[root] = (now, time.time())
    with contextlib.suppress(Exception):  # enforcement is a service, never the call's failure
        _check(store, last[1] if last is not None else None)


def _check(store: Store, previous_check: float | None) -> None:
    from .settings import get_setting

    assert store.root is not None
    if previous_check is not None:
        _warn_evicted(store.root, previous_check)
    if get_setting(store, "max-size") is None:
        return
    logs = store.root / LOGS_DIRNAME
    marker = logs / _CHECK_NAME
    try:
        if time.time() - os.stat(marker).st_mtime < CHECK_INTERVAL_S:
            return  # another process looked within the last minute
    except FileNotFoundError:
        logs.mkdir(parents=True, exist_ok=True)
    marker.touch()
    spawn(store.root)


def spawn(root: Path) -> None:
    """Start a detached enforcer for the store at *root*; do not wait for it."""
    logs = root / LOGS_DIRNAME
    logs.mkdir(parents=True, exist_ok=True)
    # Only what escapes the enforcer's own handling lands here (it logs the rest).
    _children[:] = [child for child in _children if child.poll() is None]
    err = os.open(logs / "evict.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "memostore.lifecycle.enforce", "--store", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # outlives the caller, and its terminal's signals
            env={**os.environ, "MEMOSTORE_EVICT_STARTED_BY": str(os.getpid())},
        )
    finally:
        os.close(err)
    _children.append(child)


def read_tail(path: Path, since: float) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - _TAIL_BYTES, 0))
            data = f.read()
    except OSError:
        return []
    records = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and float(record.get("t", 0)) > since:
                records.append(record)
    return records


def _warn_evicted(root: Path, since: float) -> None:
    for record in read_tail(root / LOGS_DIRNAME / LOG_NAME, since):
        if record.get("started_by") == os.getpid() and record.get("message"):
            warn(record["message"])
