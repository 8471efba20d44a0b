"""Bad input: the computation still returns, the message names the fix, the store is untouched.

Results that cannot be stored (a lock, an open file, a generator, a socket, a
structure nested too deeply), recursive structures, huge argument lists, a
``KeyboardInterrupt`` inside the body, a read-only store and a full disk. Each
case starts from a store holding one evaluation and checks, besides its own
expectations, that every file stored before is still there byte for byte and
that no temp file, lock or pending marker is left behind.

The read-only store and the full disk are tested for real where the machine
allows mounts (a read-only bind mount: tests run as root, which ``chmod`` does
not stop; a 2 MB tmpfs), and always by injecting the error into the store's
write path (``EROFS`` from ``os.open`` in the store's ``tmp/``, ``ENOSPC`` half-way
through an object's bytes).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memostore import MemostoreError, MemostoreWarning, Store, ignore_global, memo
from memostore.odb import object_store as object_store_module

from .faultkit import (
    assert_untouched,
    figure,
    fill,
    fsck_problems,
    leftovers,
    read_only_view,
    small_file_system,
    store_listing,
)


class Runs:
    """Counts body runs; an ignored global, so that it stays out of the keys."""

    def __init__(self) -> None:
        self.count = 0


RUNS = ignore_global(Runs())


def square(x: int) -> dict[str, int]:
    RUNS.count += 1
    return {"x": x, "square": x * x}


def _stored(root: Path) -> tuple[Any, dict[str, str]]:
    """A store holding one evaluation: the memoised function, and the store's listing."""
    fn = memo(store=Store(root))(square)
    fn(3)
    return fn, store_listing(root)


def _one_warning(call: Callable[[], Any]) -> tuple[Any, str]:
    """Run *call*; it must emit exactly one MemostoreWarning. (value, message)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    ours = [str(w.message) for w in caught if issubclass(w.category, MemostoreWarning)]
    assert len(ours) == 1, f"expected one MemostoreWarning, got {ours}"
    return value, ours[0]


def _no_warning(call: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)
        return call()


def _clean(root: Path) -> None:
    found = leftovers(root)
    assert not any(found.values()), f"left behind: {found}"


def _still_hits(fn: Any) -> None:
    RUNS.count = 0
    assert _no_warning(lambda: fn(3)) == {"x": 3, "square": 9}
    assert RUNS.count == 0, "the evaluation stored before was lost"


def _noted(case: str) -> None:
    """One figure line per case that passed, written as it passes (the order of tests is free)."""
    figure(
        f"bad input: {case}: the computation's result returned (or an unkeyable call refused) "
        "with one message naming the fix, every stored file untouched"
    )


# -- results that cannot be stored ----------------------------------------------------------
def _lock() -> Any:
    return threading.Lock()


def _open_file() -> Any:
    return open(__file__)


def _generator() -> Any:
    return (i for i in range(3))


def _socket() -> Any:
    return socket.socket()


def _file_inside() -> Any:
    return {"config": {"n": 3}, "log": open(os.devnull, "w")}


@pytest.mark.parametrize(
    "make", [_lock, _open_file, _generator, _socket, _file_inside], ids=lambda f: f.__name__[1:]
)
def test_unstorable_result_is_returned_with_one_warning(tmp_path: Path, make: Callable) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    made: list[Any] = []

    def produce(tag: str) -> Any:
        made.append(make())
        return made[-1]

    fn = memo(store=Store(root))(produce)
    value, message = _one_warning(lambda: fn("a"))
    assert value is made[0], "the body's own result must be returned"
    assert "could not store the result" in message
    assert "register a codec" in message or "ignore" in message, message
    assert fn.lookup("a") is None
    # Not stored: the next call computes again (and says so again).
    value, _ = _one_warning(lambda: fn("a"))
    assert value is made[1]
    for obj in made:
        getattr(obj, "close", lambda: None)()
        if isinstance(obj, dict):
            obj["log"].close()
    assert_untouched(before, store_listing(root))
    _clean(root)
    assert not fsck_problems(root)
    _still_hits(keep)
    _noted(f"unstorable result ({make.__name__[1:]})")


@pytest.mark.parametrize("make", [_lock, _generator], ids=lambda f: f.__name__[1:])
def test_unkeyable_argument_is_refused_naming_the_fix(tmp_path: Path, make: Callable) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    ran = []
    fn = memo(store=Store(root))(lambda thing: ran.append(thing))
    # A call that cannot be keyed cannot be memoised: refused before the body runs,
    # with the way out (leave the argument out of the key) in the message.
    with pytest.raises(MemostoreError, match=r"ignore="):
        fn(make())
    assert not ran
    assert_untouched(before, store_listing(root))
    _clean(root)
    _still_hits(keep)
    _noted(f"unkeyable argument ({make.__name__[1:]})")


def test_result_nested_too_deeply_is_returned_with_one_warning(tmp_path: Path) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)

    def deep(depth: int) -> list:
        top: list = []
        node = top
        for _ in range(depth):
            node.append([])
            node = node[0]
        return top

    value, message = _one_warning(lambda: memo(store=Store(root))(deep)(5000))
    assert isinstance(value, list) and "nested too deeply" in message
    assert_untouched(before, store_listing(root))
    _clean(root)
    _still_hits(keep)
    _noted("result nested 5000 deep")


# -- recursive structures and huge argument lists --------------------------------------------
class Node:
    def __init__(self, name: str) -> None:
        self.name = name
        self.next: Node | None = None


def cyclic(kind: str) -> Any:
    RUNS.count += 1
    if kind == "list":
        value: Any = [1, 2]
        value.append(value)
    elif kind == "dict":
        value = {"name": "loop"}
        value["self"] = value
    else:
        value = Node("a")
        value.next = Node("b")
        value.next.next = value
    return value


@pytest.mark.parametrize("kind", ["list", "dict", "objects"])
def test_recursive_results_are_stored_with_their_cycles(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    first = _no_warning(lambda: memo(store=Store(root))(cyclic)(kind))
    RUNS.count = 0
    again = _no_warning(lambda: memo(store=Store(root))(cyclic)(kind))
    assert RUNS.count == 0, "a recursive result was not stored"
    assert again is not first
    if kind == "list":
        assert again[:2] == [1, 2] and again[2] is again
    elif kind == "dict":
        assert again["name"] == "loop" and again["self"] is again
    else:
        assert again.name == "a" and again.next.name == "b" and again.next.next is again
    assert_untouched(before, store_listing(root))
    _clean(root)
    _still_hits(keep)
    _noted(f"recursive result ({kind})")


def test_recursive_argument_is_keyed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    loop: list = [1]
    loop.append(loop)
    fn = memo(store=Store(root))(lambda x: RUNS.__dict__.update(count=RUNS.count + 1) or len(x))
    RUNS.count = 0
    assert _no_warning(lambda: fn(loop)) == 2
    assert _no_warning(lambda: fn(loop)) == 2
    assert RUNS.count == 1
    assert_untouched(before, store_listing(root))
    _still_hits(keep)
    _noted("recursive argument")


def count_args(*values: int, **named: int) -> int:
    RUNS.count += 1
    return len(values) + len(named)


@pytest.mark.parametrize(
    ("label", "args", "kwargs"),
    [
        ("200k positional arguments", tuple(range(200_000)), {}),
        ("a list of 1M ints", (list(range(1_000_000)),), {}),
        ("10k keyword arguments", (), {f"k{i}": i for i in range(10_000)}),
    ],
)
def test_huge_argument_lists(tmp_path: Path, label: str, args: tuple, kwargs: dict) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    fn = memo(store=Store(root))(count_args)
    started = time.monotonic()
    RUNS.count = 0
    first = _no_warning(lambda: fn(*args, **kwargs))
    second = _no_warning(lambda: fn(*args, **kwargs))
    elapsed = time.monotonic() - started
    assert first == second == len(args) + len(kwargs)
    assert RUNS.count == 1
    assert elapsed < 30, f"{label}: {elapsed:.1f} s"
    assert_untouched(before, store_listing(root))
    _clean(root)
    _still_hits(keep)
    _noted(f"{label} ({elapsed:.2f} s for a miss and a hit)")


# -- KeyboardInterrupt -----------------------------------------------------------------------
def test_keyboard_interrupt_in_the_body(tmp_path: Path) -> None:
    root = tmp_path / "store"
    keep, before = _stored(root)
    raised = KeyboardInterrupt()
    state = {"interrupt": True}

    def body(n: int) -> int:
        RUNS.count += 1
        if state["interrupt"]:
            raise raised
        return n * 2

    fn = memo(store=Store(root))(body)
    with pytest.raises(KeyboardInterrupt) as info:
        fn(21)
    assert info.value is raised, "the interrupt must propagate unchanged"
    assert fn.lookup(21) is None, "nothing may be stored as the result"
    failed = list(Store(root).refs.iter("failed/"))
    assert len(failed) == 1
    assert Store(root).evaluation(failed[0][1]).body["status"] == "interrupted"
    assert_untouched(before, store_listing(root))
    _clean(root)
    assert not fsck_problems(root)
    # The next call computes and stores; the one after hits.
    state["interrupt"] = False
    RUNS.count = 0
    assert _no_warning(lambda: fn(21)) == 42
    assert _no_warning(lambda: fn(21)) == 42
    assert RUNS.count == 1
    _still_hits(keep)
    _noted("KeyboardInterrupt raised in the body")


def test_ctrl_c_in_a_running_script(tmp_path: Path) -> None:
    """A real SIGINT while the body runs: the script stops, the store stays sound."""
    root = tmp_path / "store"
    _stored(root)
    before = store_listing(root)
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import sys, time\n"
        "from memostore import memo\n"
        "@memo(store=sys.argv[1])\n"
        "def slow(n):\n"
        "    print('running', flush=True)\n"
        "    time.sleep(float(sys.argv[2]))\n"
        "    return n + 1\n"
        "print('result', slow(1), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root), "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert_untouched(before, store_listing(root))
    _clean(root)
    assert not fsck_problems(root)
    done = subprocess.run(
        [sys.executable, str(script), str(root), "0"], capture_output=True, text=True, timeout=60
    )
    assert "result 2" in done.stdout, done.stderr
    again = subprocess.run(
        [sys.executable, str(script), str(root), "0"], capture_output=True, text=True, timeout=60
    )
    assert "result 2" in again.stdout and "running" not in again.stdout
    _noted("Ctrl-C (SIGINT) in a running script")


def test_ctrl_c_while_the_result_is_stored(tmp_path: Path) -> None:
    """A real SIGINT while the result is written: recorded as interrupted by it, not lost.

    The result's ``__reduce__`` (run by the encoder as it stores the result) says
    so and waits, so the signal arrives while the result is being stored.
    """
    root = tmp_path / "store"
    script = tmp_path / "interrupted_store.py"
    script.write_text(
        "import sys, time\n"
        "from memostore import memo\n"
        "class Slow:\n"
        "    def __reduce__(self):\n"
        "        print('storing', flush=True)\n"
        "        sys.stdin.readline()  # the signal ends this wait\n"
        "        return (Slow, ())\n"
        "@memo(store=sys.argv[1])\n"
        "def body(n):\n"
        "    time.sleep(0.3)\n"
        "    return Slow()\n"
        "body(1)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "storing"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err
    store = Store(root)
    assert not list(store.refs.iter("evals/")), "nothing may be published as the result"
    failed = [store.evaluation(eid).body for _, eid in store.refs.iter("failed/")]
    assert len(failed) == 1, failed
    record = failed[0]
    assert record["status"] == "interrupted"
    assert record["error"]["type"] == "builtins.KeyboardInterrupt", record["error"]
    assert record["duration_s"] >= 0.3, "the body's own duration"
    _clean(root)
    assert not fsck_problems(root)
    _noted("Ctrl-C (SIGINT) while the result is stored")


# -- a read-only store -----------------------------------------------------------------------
def _check_read_only(root: Path, keep_root: Path, before: dict[str, str]) -> str:
    """On a store that refuses writes: hits still served; a miss warns and returns."""
    keep = memo(store=Store(root))(square)
    _still_hits(keep)
    fn = memo(store=Store(root))(square)
    RUNS.count = 0
    value, message = _one_warning(lambda: fn(4))
    assert value == {"x": 4, "square": 16} and RUNS.count == 1
    assert "not writable" in message and "MEMOSTORE_DIR" in message, message
    assert_untouched(before, store_listing(keep_root))
    _clean(keep_root)
    return message


def test_read_only_store_mounted(tmp_path: Path) -> None:
    root = tmp_path / "rw" / "store"
    _, before = _stored(root)
    with read_only_view(tmp_path / "rw") as view:
        if view is None:
            pytest.skip("this machine allows no read-only bind mount (simulated in the next test)")
        _check_read_only(view / "store", root, before)
        # A store that cannot even be created there: the computation still runs.
        fn = memo(store=view / "elsewhere")(square)
        value, message = _one_warning(lambda: fn(5))
        assert value == {"x": 5, "square": 25}
        assert "cannot open the store" in message and "not writable" in message, message
    _noted("read-only store (read-only bind mount)")


def test_read_only_store_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    _, before = _stored(root)
    real_open = os.open
    tmp_dir = str(root / "tmp")

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(tmp_dir) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    _check_read_only(root, root, before)
    _noted("read-only store (EROFS injected in the write path)")


# -- a full disk -----------------------------------------------------------------------------
def big(n: int) -> np.ndarray:
    RUNS.count += 1
    return np.full(n, 7, dtype=np.uint8)


def _check_full(root: Path, before: dict[str, str], size: int) -> str:
    fn = memo(store=Store(root))(big)
    RUNS.count = 0
    value, message = _one_warning(lambda: fn(size))
    assert value.nbytes == size and RUNS.count == 1
    assert "full" in message and "memostore gc" in message, message
    assert fn.lookup(size) is None
    assert_untouched(before, store_listing(root))
    _clean(root)
    assert not fsck_problems(root)
    _still_hits(memo(store=Store(root))(square))
    return message


def test_full_disk_mounted(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    with small_file_system(mount, "2m") as mounted:
        if not mounted:
            pytest.skip("this machine allows no tmpfs mount (simulated in the next test)")
        root = mount / "store"
        _, before = _stored(root)
        used = _used(mount)
        # A result larger than the space left fails half-way through its bytes.
        _check_full(root, before, 3 << 20)
        # New: the call's arguments and code documents (a few kB); not a partial result.
        assert _used(mount) - used < 64 << 10, "a partial object was left on the full disk"
        # A disk with no space at all: even the arguments cannot be stored.
        fill(mount, leave=0)
        _check_full(root, before, 10)
        # Space freed: storing works again.
        (mount / "filler").unlink()
        fn = memo(store=Store(root))(big)
        _no_warning(lambda: fn(1000))
        assert fn.lookup(1000) is not None
    _noted("full disk (2 MB tmpfs): result larger than the space left, and no space at all")


def _used(mount: Path) -> int:
    st = os.statvfs(mount)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_full_disk_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    _, before = _stored(root)
    real_write_all = object_store_module.write_all

    def write_half_then_fail(fd: int, data: memoryview) -> None:
        if len(data) >= 1 << 20:
            real_write_all(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(fd, data)

    monkeypatch.setattr(object_store_module, "write_all", write_half_then_fail)
    _check_full(root, before, 3 << 20)
    _noted("full disk (ENOSPC injected half-way through an object's bytes)")
