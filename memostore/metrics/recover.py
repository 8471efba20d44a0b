"""Recovering journals whose process died before sealing them.

A process killed while it runs (SIGKILL, out-of-memory, power loss) leaves its
journal in ``journal/``. The next process that logs into the store, and
``memostore log`` before it lists evaluations, seals such a journal and
records the evaluation it belonged to as ``interrupted``, with the points it
had flushed (and, for a memoised call, its arguments and code).

A journal is orphaned when its ``flock`` can be taken (its writer is gone; the
kernel drops the lock of a dead process) and, if it was written on another
machine, when it has not been touched for :data:`REMOTE_STALE_S` (a live
writer touches it every :data:`~.journal.HEARTBEAT_S` seconds; locks need not be
visible across machines). :func:`writer_alive` is the same rule for readers
that only want to know whether to list an evaluation as running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import warn
from ..odb.lockfile import pid_alive
from ..odb.objects import Links
from . import journal as jr
from .event_kinds import event_blobs

if TYPE_CHECKING:
    from ..odb.store import Store

REMOTE_STALE_S = 300.0
# A temp file older than this belongs to a journal whose creation was cut short.
_TMP_STALE_S = 3600.0


def recover_orphans(store: Store) -> list[str]:
    """Seal every orphaned journal of *store*; the ids of the evaluations recorded.

    Safe to call from many processes at once: each journal is sealed by the one
    process that holds its lock. Never raises for a damaged journal (it warns).
    """
    if store.root is None:
        return []
    directory = store.root / "journal"
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    recorded: list[str] = []
    now = time.time()
    for name in sorted(names):
        path = directory / name
        if name.startswith("tmp-"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > _TMP_STALE_S:
                    path.unlink()
            continue
        if not name.endswith(jr.JOURNAL_SUFFIX):
            continue
        try:
            evaluation_id = _recover_one(store, path, now)
        except Exception as exc:
            warn(f"could not recover the metric journal {path}: {exc}")
            continue
        if evaluation_id:
            recorded.append(evaluation_id)
    return recorded


def journal_roots(store: Store) -> set[str]:
    """Ids of the objects that journals in progress (or orphaned) refer to.

    Payload blobs (images, audio clips, graphs, ...), stored when logged, and
    a memoised call's arguments and code documents, named in its header: all
    long before the evaluation's record links them (for an orphan, its
    recovery does), so ``gc`` must keep them as roots.
    """
    if store.root is None:
        return set()
    roots: set[str] = set()
    for path in (store.root / "journal").glob(f"*{jr.JOURNAL_SUFFIX}"):
        try:
            contents = jr.parse(path.read_bytes())
        except OSError:
            continue
        roots.update(blob for e in contents.events for blob in event_blobs(e))
        header = contents.header if isinstance(contents.header, dict) else {}
        roots.update(header[name] for name in ("args", "code") if isinstance(header.get(name), str))
    return roots


def _recover_one(store: Store, path: Path, now: float) -> str | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # its writer is alive
        try:
            # The writer may have sealed and removed it between our open and lock.
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                return None
        except FileNotFoundError:
            return None
        mtime = os.fstat(fd).st_mtime
        contents = jr.parse(jr._read_all(fd))
        header = contents.header
        if header is None:
            if now - mtime > _TMP_STALE_S:
                path.unlink()
            return None
        if _maybe_remote_alive(header, mtime, now):
            return None
        evaluation_id = _record(store, header, contents, mtime)
        path.unlink()
        return evaluation_id
    finally:
        os.close(fd)


def writer_alive(fd: int, header: dict[str, Any], now: float | None = None) -> bool:
    """Whether the process writing the journal open as *fd* may still be running.

    On this host: its lock is held and its pid is alive (a pid that is gone
    means the evaluation is over even while a forked child keeps the lock). On
    another host: it was touched within :data:`REMOTE_STALE_S`.
    """
    now = time.time() if now is None else now
    process = header.get("process") or {}
    if process.get("host") != socket.gethostname():
        return now - os.fstat(fd).st_mtime < REMOTE_STALE_S
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid, started = process.get("pid"), header.get("started")
        if type(pid) is not int:
            return True
        return pid_alive(pid, started if isinstance(started, (int, float)) else None)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _maybe_remote_alive(header: dict[str, Any], mtime: float, now: float) -> bool:
    host = (header.get("process") or {}).get("host")
    return host != socket.gethostname() and now - mtime < REMOTE_STALE_S


def _present(store: Store, object_id: Any) -> str | None:
    # A recovered record links only what is in the store (fsck checks every link).
    if isinstance(object_id, str) and store.objects.contains(object_id):
        return object_id
    return None


def _record(store: Store, header: dict[str, Any], contents: jr.Contents, mtime: float) -> str:
    from ..odb import index
    from ..odb.objects import canonical_json
    from ..odb.refs import ref_part
    from ..records.evaluation import evaluation_doc, failed_ref_name
    from .runs import evaluation_run
    from .seal import json_safe, seal

    logs_id = None if contents.empty else seal(store.objects, contents)
    process = dict(header.get("process") or {})
    started = float(header.get("started") or mtime)
    ended = contents.last_wall or mtime
    function = header.get("function") or "run:unknown"
    key = header.get("key")
    hparams = {k: json_safe(v) for k, v in (header.get("hparams") or {}).items()}
    digest = header.get("code_digest")
    fields: dict[str, Any] = {
        "function": function,
        "key": key,
        "code": _present(store, header.get("code")),
        "code_digest": digest if isinstance(digest, str) else None,
        "version": None,
        "args": _present(store, header.get("args")),
        "hparams": hparams,
        "args_summary": _summaries(header.get("args_summary")),
        "result": None,
        "result_summary": None,
        "status": "interrupted",
        "error": {
            "type": "memostore.ProcessDied",
            "message": (
                f"process {process.get('pid')} on {process.get('host')} ended before the "
                "evaluation finished (killed?); the metrics it had flushed are kept"
            ),
            "traceback": "",
        },
        "started": started,
        "duration_s": max(0.0, ended - started),
        "provenance": {**process, "recovered_by": jr.describe_process()},
        "parents": [],
        "payloads": {},
        "logs": logs_id,
    }
    name = evaluation_run(contents.events, standalone=not key)
    if logs_id is not None and name is not None:
        fields["run_name"] = name
    canonical_json(fields)  # fail here, before anything is published, if not JSON-safe
    doc = evaluation_doc(fields, Links())
    store.objects.add_doc(doc)
    store.objects.sync()
    if key:
        name = failed_ref_name(function, key)
        # Keep the newest failure: an orphan found late must not hide a newer one.
        while True:
            old = store.refs.read(name)
            if old is not None and _started(store, old) > started:
                break
            if store.refs.set_if_equals(name, old, doc.id):
                break
    else:
        script = function.split(":", 1)[-1]
        store.refs.set(f"runs/{ref_part(script)}/{doc.id}", doc.id)
    index.record(store, doc.id, doc.body)
    return doc.id


def _summaries(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _started(store: Store, evaluation_id: str) -> float:
    try:
        return float(store.evaluation(evaluation_id).body.get("started") or 0.0)
    except Exception:
        return 0.0
