"""Keeping a store under its ``max-size`` setting: the background enforcer.

``python -m memostore.lifecycle.enforce --store ROOT`` is started detached by
:func:`memostore.lifecycle.trigger.after_store`. It takes ``logs/evict.lock``
(so one enforcer runs per store; the others exit at once), measures the bytes
under ``objects/`` and, if they exceed the limit, evicts least recently used
evaluations (:mod:`memostore.lifecycle.eviction`) with the ``gc-grace``
setting as grace period. It appends one JSON line to ``logs/evict.log`` and,
when it evicted anything or failed, leaves a one-line notice in
``logs/evict.notice``, which the next ``memostore`` command prints (the
caller's stderr is not the place: its process may be long gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LockTimeout, MemostoreError
from ..odb.fsutil import write_atomically
from ..odb.lockfile import LockFile
from .trigger import LOG_NAME, LOGS_DIRNAME, NOTICE_NAME

if TYPE_CHECKING:
    from ..odb.store import Store

_LOCK_BASE = "evict"
# A live enforcer may hold its lock for as long as eviction takes; on this host a dead
# holder is recognised by its pid at once, on another host after this long.
_LOCK_STALE_S = 6 * 3600.0


def objects_bytes(root: Path) -> int:
    """Bytes of every file under ``objects/`` (loose objects and packs), without links."""
    total = 0
    stack = [str(root / "objects")]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def enforce(store: Store, *, started_by: int | None = None) -> dict[str, Any] | None:
    """Evict until the store fits its ``max-size``; return the log record written.

    Returns None when another enforcer holds the lock or no limit is set.
    """
    from .maintenance import DEFAULT_GRACE_S
    from .settings import format_size, get_setting

    assert store.root is not None
    logs = store.root / LOGS_DIRNAME
    logs.mkdir(parents=True, exist_ok=True)
    lock = LockFile(logs / _LOCK_BASE, timeout=0.0, stale_after=_LOCK_STALE_S)
    try:
        lock.acquire()
    except LockTimeout:
        return None  # one enforcer at a time; the running one does the work
    try:
        limit = get_setting(store, "max-size")
        if limit is None:
            return None
        grace = get_setting(store, "gc-grace")
        grace = DEFAULT_GRACE_S if grace is None else float(grace)
        record: dict[str, Any] = {
            "t": time.time(),
            "pid": os.getpid(),
            "started_by": started_by,
            "max_size": limit,
            "bytes_before": objects_bytes(store.root),
        }
        if record["bytes_before"] <= limit:
            record.update(evicted=0, bytes_after=record["bytes_before"], message=None)
        else:
            record.update(_evict(store, limit, grace))
        size = format_size(int(limit))
        if record.get("error"):
            record["message"] = f"automatic eviction (max-size {size}) failed: {record['error']}"
        elif record["evicted"]:
            record["message"] = (
                f"evicted {record['evicted']} least recently used evaluation(s) to keep the "
                f"store under max-size {size} ({_human(record['bytes_before'])} -> "
                f"{_human(record['bytes_after'])}); see {logs / LOG_NAME}"
            )
            if record.get("over_limit"):
                record["message"] += "; still over: the rest is tagged, running or recent"
        _append_line(logs / LOG_NAME, record)
        if record.get("message"):
            _write_notice(logs / NOTICE_NAME, record["message"])
        return record
    finally:
        lock.release()


def _evict(store: Store, limit: int, grace: float) -> dict[str, Any]:
    from .eviction import EvictionPolicy, evict

    try:
        report = evict(store, EvictionPolicy(max_size=int(limit)), grace_s=grace)
    except MemostoreError as exc:
        return {"evicted": 0, "bytes_after": None, "error": str(exc)}
    assert store.root is not None
    return {
        "evicted": len(report.evicted),
        "evaluations": [e.id for e in report.evicted],
        "bytes_freed": report.gc.bytes_freed if report.gc is not None else 0,
        "bytes_after": objects_bytes(store.root),
        "over_limit": report.over_limit,
        "error": None,
    }


def _human(n: int | None) -> str:
    from ..values.summaries import format_bytes

    return "?" if n is None else format_bytes(n)


def _append_line(path: Path, record: dict[str, Any]) -> None:
    # One write on an O_APPEND descriptor: lines of concurrent writers never interleave.
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _write_notice(path: Path, message: str) -> None:
    write_atomically(path, (message + "\n").encode(), fsync=False)  # a notice, shown once


def take_notice(store: Store) -> str | None:
    """The notice the last automatic eviction left, removed as it is read (for the CLI)."""
    if store.root is None:
        return None
    path = store.root / LOGS_DIRNAME / NOTICE_NAME
    try:
        # Rename first: of two commands run at once, one prints it.
        taken = path.with_name(f".{path.name}.{os.getpid()}.taken")
        os.rename(path, taken)
    except OSError:
        return None
    try:
        return taken.read_text().strip() or None
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            taken.unlink()


def main(argv: list[str] | None = None) -> int:
    """``python -m memostore.lifecycle.enforce --store ROOT``: one enforcement run."""
    import argparse

    from ..odb.store import Store

    parser = argparse.ArgumentParser(prog="python -m memostore.lifecycle.enforce")
    parser.add_argument("--store", required=True, help="the store directory")
    args = parser.parse_args(argv)
    store = Store(args.store, create=False)
    started_by = os.environ.get("MEMOSTORE_EVICT_STARTED_BY", "")
    enforce(store, started_by=int(started_by) if started_by.isdigit() else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
