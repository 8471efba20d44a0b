"""Auto-fetch: a memoised call that misses locally asks the remotes that opted in.

``fetch_on_miss(store, ref)`` is called by ``@memo`` when the local ref of a
call is absent. For each remote configured with ``auto_fetch`` it reads
``refs/<ref>`` there; if the call is known, it downloads that evaluation and
what it reaches (verified, as ``pull`` does) and sets the local ref, so the
caller restores the result as if it had been computed here.

It never raises and never holds a call up for long:

- with no auto-fetch remote configured it costs one ``stat`` of
  ``config.json`` (the parsed config is cached per store and re-read only when
  the file changes);
- the lookup of the ref runs in a daemon thread and is abandoned after
  ``LOOKUP_TIMEOUT_S`` seconds (a hung network mount cannot hang the call);
  S3 remotes are opened with short connect timeouts and few retries;
- a remote that cannot be reached is skipped for ``RETRY_AFTER_S`` seconds,
  and reported by a single :class:`MemostoreWarning` per process; the call then
  computes locally.

What a remote sends is data: the fetched evaluation must be the one its ref
names (same function and call key, checked before anything is downloaded),
every object must hash to its id, and every object is recorded as the
remote's before it arrives (``pull_refs``, ``memostore/trust/origins.py``).
Restoring the result then calls only what the decoding allowlist allows, and
loads code stored by value (pickled) only if the remote is marked trusted
(``memostore remote trust NAME``); otherwise the call computes, after one
warning naming that command.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import RefError, warn
from ..odb.refs import check_ref_name
from ..transport.config import RemoteConfig
from . import reach

if TYPE_CHECKING:
    from ..odb.store import Store

T = TypeVar("T")

LOOKUP_TIMEOUT_S = 5.0
FETCH_JOBS = 8


def fetch_on_miss(store: Store, ref_name: str) -> str | None:
    """Look *ref_name* up on the auto-fetch remotes and download its evaluation.

    Args:
        store: the local store, which lacks *ref_name*.
        ref_name: the call's ref (``evals/<function>/<key>``).

    Returns:
        The evaluation id now named by the local ref, or None when no remote
        has it (or none could be asked). Never raises.
    """
    try:
        remotes = reach.auto_fetch_remotes(store)
    except Exception as exc:
        reach.warn_once(
            ("config", store.config_path), f"cannot read the remotes configured ({exc})"
        )
        return None
    if not remotes:
        return None
    try:
        check_ref_name(ref_name)
    except RefError:
        return None
    for remote in remotes:
        try:
            found = _fetch_from(store, remote, ref_name)
        except Exception as exc:
            # A damaged object or a refused request: this evaluation is not
            # fetched, the call computes it, and other keys may still be fetched.
            warn(
                f"could not fetch {ref_name} from remote {reach.label(remote)}: {exc}; "
                "computing locally"
            )
            continue
        if found is not None:
            return found
    return None


def _fetch_from(store: Store, remote: RemoteConfig, ref_name: str) -> str | None:
    # Imported here: the transports are only needed once a remote is configured.
    from ..transport import RemoteObjectTooLarge, RemoteUnreachable
    from .sync import SyncReport, parse_ref, pull_refs, read_remote_ref, worker_pool

    def read_ref() -> bytes | None:
        try:
            return read_remote_ref(transport, ref_name)
        except RemoteObjectTooLarge:
            return None  # a damaged ref of this call: a miss, the remote stays in use

    key = (remote.url, remote.endpoint)
    if reach.is_down(key):
        return None
    try:
        transport = reach.transport_for(remote)
        raw = _with_timeout(read_ref, LOOKUP_TIMEOUT_S)
    except Exception as exc:
        # Whatever keeps the lookup from answering (no network, no mount, no
        # credentials, no boto3) holds for every call: skip this remote a while.
        reach.mark_down(key, remote, exc)
        return None
    value = parse_ref(raw)
    if value is None:
        return None
    report = SyncReport("fetch", transport.url)
    try:
        with worker_pool(FETCH_JOBS) as pool:
            pull_refs(store, transport, {ref_name: value}, pool, report)
    except (RemoteUnreachable, TimeoutError) as exc:
        reach.mark_down(key, remote, exc)
        return None
    reach.mark_up(key)
    if ref_name in report.skipped:
        reason = report.skipped[ref_name]
        warn(f"remote {reach.label(remote)} holds a ref {ref_name} that {reason}; ignored")
        return None
    try:
        return store.refs.read(ref_name)
    except RefError:
        return None


def _with_timeout(fn: Callable[[], T], timeout: float) -> T:
    """Run *fn* in a daemon thread; TimeoutError if it has not answered in time.

    A daemon thread, not an executor: a call stuck in the kernel on a dead
    network mount is left behind and cannot keep the interpreter from exiting.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="memostore-fetch-lookup", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def reset_state() -> None:
    """Forget cached configs, transports and unreachable remotes (tests)."""
    reach.reset_state()
