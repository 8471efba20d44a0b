"""A child process that stores memoised results and can be killed at chosen points.

Usage: ``crash_child.py PROGRESS MODE KEY...`` with ``$MEMOSTORE_DIR`` naming
the store. MODE is ``small`` (a few kB per result) or ``large`` (an array of
``$RELIABILITY_LARGE_MB`` MB). For each key the child calls the memoised
function, checks the value against an independent computation and appends to
PROGRESS::

    ready                      imports done, about to call
    start KEY                  about to call
    computing KEY              the body runs (a miss)
    done KEY hit|miss ok|BAD   the call returned (BAD: wrong value)
    counts {JSON}              at a normal exit: how often each kill point passed

``$RELIABILITY_KILL=EVENT:N`` makes the child SIGKILL itself the N-th time it
passes EVENT, so that the parent can crash it inside each window of a store
(with ``$RELIABILITY_PAUSE_UNTIL=FILE`` it reports ``paused`` there instead and
waits until FILE exists, so that the parent can act inside that window):

    object-write     half-way through writing an object's bytes to its temp file
    fsync            before an fsync (object data, a ref's new content)
    replace-before   before a rename into place (object complete but not visible)
    replace-after    after a rename into place (object visible, ref not yet set)
    lock-held        a ref's lock is taken, its new content not yet written
    pending          the evaluation's pending roots are written, the body not yet run
    publish-before   the evaluation's objects are all written, its ref not yet set
    publish-after    the ref is set, the call has not returned yet
    body             inside the function body
    lock-created     a ref's lock is being made: its file exists, not yet under the lock's name
    lease-created    a call's lease is being made: a file of it exists, its record may not
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from typing import Any

import numpy as np


class Hooks:
    """Progress reports and kill points.

    The memoised bodies reach this state only through the ``HOOKS`` instance,
    an ignored global, so that it never enters their keys: a global holding data
    is keyed by value, and would make keys depend on this run's kill setting.
    """

    def __init__(self, progress: str, spec: str) -> None:
        self.fd = os.open(progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.write = os.write
        self.counts: Counter[str] = Counter()
        event, _, n = spec.partition(":")
        self.event = event
        self.at = int(n) if n else 0
        self.ran: set[int] = set()
        self.pause_until = os.environ.get("RELIABILITY_PAUSE_UNTIL", "")

    def report(self, line: str) -> None:
        self.write(self.fd, (line + "\n").encode())

    def passing(self, event: str) -> bool:
        """Count one pass through *event*; True when this pass is the one to die at."""
        self.counts[event] += 1
        return event == self.event and self.counts[event] == self.at

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def checkpoint(self, event: str) -> None:
        if self.passing(event):
            if self.pause_until:
                self.pause()
            else:
                self.die()

    def pause(self) -> None:
        """Stop here (instead of dying) until the parent creates the file it named."""
        self.report("paused")
        while not os.path.exists(self.pause_until):
            time.sleep(0.005)

    def body(self, key: int) -> None:
        self.report(f"computing {key}")
        self.ran.add(key)
        self.checkpoint("body")


HOOKS = Hooks(sys.argv[1], os.environ.get("RELIABILITY_KILL", ""))
passing, die, checkpoint, report = HOOKS.passing, HOOKS.die, HOOKS.checkpoint, HOOKS.report


def _instrument() -> None:
    """Wrap the store's I/O steps so that the child can die inside each of them."""
    from memostore.odb import object_store, refs, store
    from memostore.odb.lockfile import LockFile

    real_write_all = object_store.write_all

    def write_all(fd: int, data: memoryview) -> None:
        if passing("object-write"):
            real_write_all(fd, data[: len(data) // 2])
            die()
        real_write_all(fd, data)

    object_store.write_all = write_all

    real_barrier = object_store.barrier

    def barrier(path: Any) -> bool:
        checkpoint("barrier")  # the one flush of an evaluation's objects
        return real_barrier(path)

    object_store.barrier = barrier

    real_fsync, real_replace, real_open = os.fsync, os.replace, os.open

    def fsync(fd: int) -> None:
        checkpoint("fsync")
        real_fsync(fd)

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        checkpoint("replace-before")
        real_replace(src, dst, **kw)
        checkpoint("replace-after")

    def open_(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *args, **kw)
        if flags & os.O_EXCL and ".lock" in os.path.basename(str(path)):
            checkpoint("lock-created")
        elif flags & os.O_EXCL and f"{os.sep}leases{os.sep}" in str(path):
            checkpoint("lease-created")
        return fd

    os.fsync, os.replace, os.open = fsync, replace, open_

    real_acquire = LockFile.acquire

    def acquire(self: LockFile) -> None:
        real_acquire(self)
        checkpoint("lock-held")

    LockFile.acquire = acquire

    real_mark = store.Store.mark_pending

    def mark_pending(self: Any, run_id: str, roots: list[str]) -> None:
        real_mark(self, run_id, roots)
        checkpoint("pending")

    store.Store.mark_pending = mark_pending

    real_set = refs.DiskRefContainer.set

    def set_(self: Any, name: str, new: str, **kw: Any) -> Any:
        checkpoint("publish-before")
        previous = real_set(self, name, new, **kw)
        checkpoint("publish-after")
        return previous

    refs.DiskRefContainer.set = set_


_instrument()

from memostore import ignore_global, memo  # noqa: E402  (after the instrumentation, on purpose)

ignore_global(HOOKS)


def expected_small(key: int) -> dict[str, Any]:
    return {
        "key": key,
        "squares": [i * i for i in range(key % 40)],
        "text": f"value {key} " * (key % 9),
        "array": np.arange(key % 500 + 1, dtype=np.int64) * key,
        "nested": {"pair": (key, -key), "flag": key % 2 == 0},
    }


def large_mb() -> int:
    return int(os.environ.get("RELIABILITY_LARGE_MB", "500"))


def expected_large(key: int) -> np.ndarray:
    values = np.arange(large_mb() * (1 << 20) // 4, dtype=np.uint32)
    values ^= np.uint32(key * 2654435761 % (1 << 32))
    return values


@memo
def small(key: int, padding: tuple[int, ...]) -> dict[str, Any]:
    """A small result; *padding* makes the arguments document worth flushing."""
    HOOKS.body(key)
    return expected_small(key)


@memo
def large(key: int, mb: int) -> np.ndarray:
    HOOKS.body(key)
    return expected_large(key)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def main() -> None:
    import warnings

    from memostore import MemostoreWarning

    # A warning would mean a stored result was lost or could not be stored: fail loudly.
    warnings.simplefilter("error", MemostoreWarning)
    mode = sys.argv[2]
    keys = [int(k) for k in sys.argv[3:]]
    report("ready")
    for key in keys:
        report(f"start {key}")
        if mode == "small":
            value = small(key, tuple(range(key % 5, 300)))
            good = same(value, expected_small(key))
        else:
            value = large(key, large_mb())
            good = same(value, expected_large(key))
        del value
        kind = "miss" if key in HOOKS.ran else "hit"
        HOOKS.report(f"done {key} {kind} {'ok' if good else 'BAD'}")
    HOOKS.report("counts " + json.dumps(dict(HOOKS.counts)))


if __name__ == "__main__":
    main()
