"""Tools shared by the reliability suite: store listings, fsck and gc, child processes, figures.

Every check here goes through the public surface or the store's own files:
listings are made by walking the store directory, fsck and gc are those of
:mod:`memostore.lifecycle.maintenance` (or the ``memostore`` command when it is
installed), and child processes are real interpreters that may be killed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import blake3

from memostore import Store
from memostore.lifecycle import maintenance
from memostore.odb.lockfile import LockFile

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# Figures reported by the tests; the package's conftest prints them at the end
# of the run, and appends them to $MEMOSTORE_RELIABILITY_FIGURES when set.
FIGURES: list[str] = []


def env_int(name: str, default: int) -> int:
    """An integer setting from the environment (how long runs scale the suite up)."""
    text = os.environ.get(name, "").strip()
    return int(text) if text else default


def env_float(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    return float(text) if text else default


def seeded_rng(name: str) -> random.Random:
    """A random generator seeded from $MEMOSTORE_RELIABILITY_SEED (printed, so failures replay)."""
    seed = env_int("MEMOSTORE_RELIABILITY_SEED", 0) or random.SystemRandom().randrange(1 << 30)
    print(f"{name}: seed {seed} (set MEMOSTORE_RELIABILITY_SEED={seed} to replay)")
    return random.Random(seed)


def figure(line: str) -> None:
    """Print one summary line of the suite and keep it for the end-of-run report."""
    print(line)
    FIGURES.append(line)
    path = os.environ.get("MEMOSTORE_RELIABILITY_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"time": time.time(), "line": line}) + "\n")


# -- the store's files -------------------------------------------------------------------
def _digest_file(path: Path) -> str:
    hasher = blake3.blake3()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def is_lock_name(name: str) -> bool:
    return name.endswith(".lock") or ".lock." in name


def store_listing(root: Path) -> dict[str, str]:
    """Relative path -> content digest of every file that holds stored state.

    Objects, refs, ``FORMAT`` and ``config.json``; lock files and scratch
    directories (``tmp/``, ``pending/``, ``journal/``, the index cache) are left
    out: they hold no result.
    """
    listing: dict[str, str] = {}
    for name in ("FORMAT", "config.json"):
        if (root / name).is_file():
            listing[name] = _digest_file(root / name)
    for sub in ("objects", "refs"):
        base = root / sub
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for filename in files:
                if is_lock_name(filename):
                    continue
                path = Path(dirpath) / filename
                listing[str(path.relative_to(root))] = _digest_file(path)
    return listing


def assert_untouched(before: dict[str, str], after: dict[str, str]) -> None:
    """Everything stored before is still there, byte for byte."""
    lost = sorted(set(before) - set(after))
    changed = sorted(p for p in before if p in after and after[p] != before[p])
    assert not lost and not changed, f"stored files lost: {lost[:5]}; changed: {changed[:5]}"


def leftovers(root: Path) -> dict[str, list[str]]:
    """Files a crash may leave behind: temp files, locks and their companions, pending markers."""
    found: dict[str, list[str]] = {"tmp": [], "locks": [], "pending": []}
    if (root / "tmp").is_dir():
        found["tmp"] = sorted(os.listdir(root / "tmp"))
    if (root / "pending").is_dir():
        found["pending"] = sorted(os.listdir(root / "pending"))
    found["lock companions"] = []
    # Lease records of holders killed before they took their lease's name.
    found["lease scratch"] = [
        str(Path(dirpath, name).relative_to(root))
        for dirpath, _dirs, files in os.walk(root / "leases")
        for name in files
        if name.startswith(".")
    ]
    for dirpath, _dirs, files in os.walk(root / "refs"):
        for filename in files:
            if is_lock_name(filename):
                kind = "locks" if filename.endswith(".lock") else "lock companions"
                found[kind].append(str(Path(dirpath, filename).relative_to(root)))
    return found


def break_leftover_locks(root: Path, limit_s: float = 5.0) -> float:
    """Take and release every lock left in the store; return the longest wait.

    A lock whose holder died on this host must be broken at once by the next
    writer: this is what that writer does, without changing any ref.
    """
    longest = 0.0
    for rel in leftovers(root)["locks"]:
        target = root / rel[: -len(".lock")]
        started = time.monotonic()
        lock = LockFile(target, timeout=limit_s)
        lock.acquire()
        lock.release()
        longest = max(longest, time.monotonic() - started)
    return longest


# -- fsck and gc -------------------------------------------------------------------------
def fsck_problems(root: Path) -> list[str]:
    """What fsck finds wrong with the store at *root*, read by a fresh Store (no caches).

    A child killed before it finished creating the store (FORMAT is written last,
    and before any object) stored nothing: there is nothing to check yet.
    """
    if not (root / "FORMAT").exists():
        return []
    report = maintenance.fsck(Store(root, create=False), rebuild_index=False)
    return [str(p) for p in report.problems]


def gc_store(root: Path, grace_s: float) -> Any:
    return maintenance.gc(Store(root, create=False), grace_s=grace_s)


def cli_works() -> bool:
    """True when the ``memostore`` command is installed and starts."""
    proc = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode == 0 and "fsck" in proc.stdout


def cli(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- child processes --------------------------------------------------------------------------
def child_env(store: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "MEMOSTORE_DIR": str(store), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("RELIABILITY_KILL", None)
    env.update(extra or {})
    return env


class Child:
    """A helper script run in its own interpreter, reporting progress through a file.

    The child appends one line per step to *progress* with a single ``write`` on
    an ``O_APPEND`` descriptor, so the lines survive a SIGKILL of the child (they
    are in the page cache) and are never torn.
    """

    def __init__(
        self,
        script: str,
        args: Iterable[str],
        progress: Path,
        env: dict[str, str],
    ) -> None:
        self.progress = progress
        progress.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / script), str(progress), *args],
            env=env,
            cwd=str(progress.parent),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def lines(self) -> list[list[str]]:
        """The progress lines written so far, each as [marker, rest]."""
        return [line.split(" ", 1) for line in self.progress.read_text().splitlines() if line]

    def wait_for(self, marker: str, timeout: float = 60) -> bool:
        """Wait until the child wrote *marker* (True) or exited (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(parts[0] == marker for parts in self.lines()):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.002)
        raise AssertionError(f"child did not reach {marker!r} in {timeout} s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        """(exit status, output); a child killed by SIGKILL reports ``-9``."""
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            output, _ = self.proc.communicate()
            raise AssertionError(f"child hung for {timeout} s:\n{output}") from None
        return self.proc.returncode, output


def run_child(
    script: str, args: Iterable[str], progress: Path, env: dict[str, str], timeout: float = 300
) -> tuple[list[list[str]], str]:
    """Run a child to the end; fail with its output unless it exits 0."""
    child = Child(script, args, progress, env)
    rc, output = child.finish(timeout)
    assert rc == 0, f"{script} exited {rc}:\n{output[-4000:]}"
    return child.lines(), output


# -- file systems that refuse writes ----------------------------------------------------------
def _run_quietly(*argv: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def read_only_view(directory: Path) -> Iterator[Path | None]:
    """A read-only bind mount of *directory*, or None where this machine allows none.

    Tests run as root, which ``chmod`` does not stop; a read-only mount stops
    everyone. Needs CAP_SYS_ADMIN (``mount --bind`` then ``remount,ro``).
    """
    view = directory.with_name(directory.name + "-read-only")
    view.mkdir()
    if not _run_quietly("mount", "--bind", str(directory), str(view)):
        yield None
        return
    try:
        if not _run_quietly("mount", "-o", "remount,bind,ro", str(view)) or _writable(view):
            yield None
            return
        yield view
    finally:
        _unmount(view)


@contextlib.contextmanager
def small_file_system(directory: Path, size: str = "2m") -> Iterator[bool]:
    """Mount a tmpfs of *size* on *directory* (False where this machine allows none)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not _run_quietly("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)):
        yield False
        return
    try:
        yield True
    finally:
        _unmount(directory)


def _unmount(directory: Path) -> None:
    # A store of the test may still map a pack or hold a file open there:
    # detach the mount lazily then, so that no mount outlives the test.
    if not _run_quietly("umount", str(directory)):
        _run_quietly("umount", "--lazy", str(directory))


def _writable(directory: Path) -> bool:
    probe = directory / ".probe"
    try:
        probe.write_text("x")
    except OSError as exc:
        return exc.errno != errno.EROFS
    probe.unlink()
    return True


def fill(directory: Path, leave: int = 0) -> None:
    """Fill the file system of *directory* until at most *leave* bytes are free."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            st = os.statvfs(directory)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                return
            try:
                os.write(fd, b"\0" * min(1 << 16, free - leave))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)
