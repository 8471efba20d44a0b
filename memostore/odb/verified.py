"""The verified record: which store files were proven to hold their objects' bytes, by stat.

A large blob is restored by memory-mapping its file (a loose object, or a member
of a pack), so a hit costs next to nothing whatever the size. Its bytes must
still be proven to match its id before the hit returns, and hashing a gigabyte
on every hit would cost many times the restore. The record remembers, for each
such file, the stat it had when its bytes were last proven: when this store
wrote it (hashed as it was written), when a pull moved it into place (hashed
before that), or when a reader hashed it. A reader whose ``stat`` of the file
gives the same *stamp* skips the hashing; any other stamp is hashed again.

Stamp: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``. Store files are
written once and made read-only; any write, truncation, ``chmod``, rename or
hard link of the inode sets its ctime to the current time, and no call lets a
program set a ctime back (``touch -r``/``utime`` restore mtime only). A copy
(``cp -a``, rsync) or a replacement is another inode with a new ctime. What a
matching stamp does not prove: a change made below the file system (a failing
disk, a write to the block device, a kernel bug), a change by someone who sets
the system clock back first (root), and, on file systems whose ctime is coarse
(a kernel clock tick; file systems without fine-grained timestamps), a change
made within the same tick as the stamp was taken. For the last, a stamp is
recorded only when the file system hands out fine-grained ctimes (probed once
per process and device: Linux 6.13+ does for ext4, xfs, btrfs, tmpfs) or when
the ctime is at least :data:`RACY_NS` older than the recording; otherwise the
file is hashed on each use until it is that old (as git treats "racily clean"
index entries).

On disk, one small append-only file per recorded store file, under
``verified/`` (layout in ``docs/format.md``)::

    verified/objects/ab/cdef...      for the loose object objects/ab/cdef...
    verified/packs/<name>            for packs/<name>.pack

Each line is ``dev ino size mtime_ns ctime_ns MEMBERS CHECK``: MEMBERS is ``*``
(every byte of a loose object, every member of a pack) or the comma-separated
ids of the pack members proven; CHECK is the first 16 hex digits of the
BLAKE3 digest of ``memostore:verified:1\\n<key>\\n<the line before CHECK>``, so
a torn or interleaved append (or a record copied under another name) is
ignored. Lines are appended with ``O_APPEND`` by any number of processes, never
fsynced: losing a line, or the whole record, costs one more hash, never a
wrong answer. A record that grows past :data:`COMPACT_BYTES` is rewritten with
its current lines only.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import blake3

from .fsutil import write_all, write_atomically

Stamp = tuple[int, int, int, int, int]

ALL = "*"
HEADER = "memostore:verified:1\n"
# A ctime younger than this at recording time may share its clock tick with a
# later change (coarse timestamps; 2 s also covers file servers with 1 s stamps
# and clocks kept within NTP's usual error): such a stamp is not recorded.
RACY_NS = 2_000_000_000
# Files at least this large are recorded: smaller objects are read whole and
# re-hashed on every read, which costs less than a record.
RECORD_MIN_BYTES = 1 << 20
COMPACT_BYTES = 64 << 10
_CHECK_HEX = 16
# From this size, proofs hash on every core.
_PARALLEL_MIN = 1 << 20

# record file path -> (file stamp, the record file's own (ino, size, mtime_ns) or None
# when there is none, members).
# Shared by every store object of the process; a read re-stats the record file, so
# appends by other processes and deletions (fsck, gc) are seen at the next read.
_known: dict[str, tuple[Stamp, tuple[int, int, int] | None, frozenset[str]]] = {}
_known_lock = threading.Lock()
_fine_grained: dict[int, bool] = {}  # st_dev -> does it give fine-grained ctimes?
_hashed = [0]
_hashed_lock = threading.Lock()


def stamp_of(st: os.stat_result) -> Stamp:
    """The stamp of a stat result: what a later stat must equal for the proof to stand."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hash_mapped(data: bytes | bytearray | memoryview) -> str:
    """The BLAKE3 digest of mapped bytes being proven, counted in :func:`hashed_bytes`."""
    threads = blake3.blake3.AUTO if len(data) >= _PARALLEL_MIN else 1
    digest = blake3.blake3(data, max_threads=threads).hexdigest()
    with _hashed_lock:
        _hashed[0] += len(data)
    return digest


def hashed_bytes() -> int:
    """Bytes of mapped files this process hashed to prove them (a restore that trusts
    the record adds nothing)."""
    return _hashed[0]


def forget_known() -> None:
    """Drop this process's copy of every record (the next reads load them from disk)."""
    with _known_lock:
        _known.clear()


class VerifiedRecord:
    """The verified record of one store: ``<root>/verified``.

    Args:
        root: the record's directory.
        tmp_dir: the store's temp directory (same file system), for the ctime
            probe and for compaction.
    """

    def __init__(self, root: Path, tmp_dir: Path) -> None:
        self.root = Path(root)
        self._root_text = str(root)
        self.tmp_dir = Path(tmp_dir)

    def path_of(self, key: str) -> str:
        """The record file of *key* (``objects/ab/cdef...`` or ``packs/<name>``)."""
        return f"{self._root_text}/{key}"

    # -- reading -------------------------------------------------------------------------
    def proven(self, key: str, stamp: Stamp) -> frozenset[str]:
        """The members proven for the file of *key* while it has *stamp* (may hold ALL)."""
        path = self.path_of(key)
        own = _own_stat(path)
        found = _known.get(path)
        if found is not None and found[0] == stamp and found[1] == own:
            return found[2]
        members = self._load(path, key, stamp, own[1]) if own is not None else frozenset()
        with _known_lock:
            _known[path] = (stamp, own, members)
        return members

    def covers(self, key: str, stamp: Stamp, member: str = ALL) -> bool:
        """True if *member* (or all) of the file of *key* was proven under *stamp*."""
        members = self.proven(key, stamp)
        return ALL in members or member in members

    def _load(self, path: str, key: str, stamp: Stamp, size: int) -> frozenset[str]:
        try:
            with open(path, "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            return frozenset()
        members: set[str] = set()
        current: list[str] = []
        for line in text.splitlines():
            if not line:
                continue  # each append starts with a newline (see add)
            parsed = _parse(key, line)
            if parsed is None:
                continue
            line_stamp, line_members = parsed
            if line_stamp[1:] == stamp[1:]:
                current.append(line)  # this file's (seen from any machine): kept by compaction
                if line_stamp == stamp:
                    members.update(line_members)
        if size > COMPACT_BYTES:
            self._compact(path, current)
        return frozenset(members)

    def _compact(self, path: str, lines: list[str]) -> None:
        # A concurrent append to the old file is lost: it costs one more hash, later.
        with contextlib.suppress(OSError):
            data = "".join(line + "\n" for line in lines).encode("ascii")
            write_atomically(Path(path), data, fsync=False)  # a cache: lost, it costs a hash

    # -- writing -------------------------------------------------------------------------
    def add(self, key: str, stamp: Stamp, members: Iterable[str] = (ALL,)) -> bool:
        """Record that *members* of the file of *key* hold their ids' bytes under *stamp*.

        Call only with a stamp taken (by ``stat``) after the bytes were proven and
        before nothing but this process could have touched the file since. Not
        recorded (False) when the stamp cannot be trusted: see :data:`RACY_NS`.
        Never raises: where the record file cannot be written (a read-only or
        full store) only this process remembers the proof.
        """
        wanted = frozenset(members)
        if not wanted or not self._trustworthy(stamp):
            return False
        path = self.path_of(key)
        listed = ALL if ALL in wanted else ",".join(sorted(wanted))
        body = " ".join(map(str, stamp)) + " " + listed
        # A leading newline ends a line another writer left torn, instead of joining it.
        line = f"\n{body} {_check(key, body)}\n".encode("ascii")
        try:
            own: tuple[int, int, int] | None = _append(path, line)
        except OSError:
            # A read-only or full store: this process remembers it all the same.
            own = _own_stat(path)
        with _known_lock:
            found = _known.get(path)
            before = found[2] if found is not None and found[0] == stamp else frozenset()
            _known[path] = (stamp, own, before | wanted)
        return True

    def carry(self, key: str, before: os.stat_result, after: os.stat_result) -> None:
        """Carry the proof across a metadata change this process just made (a freshen's
        ``utime``, a push's hard link): same inode and size, new times.

        A change someone else made to the file between *before* and *after* (a
        few system calls apart) is not seen: that window is the price of not
        hashing a file again because gc's clock was refreshed.
        """
        old, new = stamp_of(before), stamp_of(after)
        if old == new or old[:3] != new[:3]:
            return
        members = self.proven(key, old)
        if members:
            self.add(key, new, members)

    def forget(self, key: str) -> None:
        """Drop the record of *key* (the file was removed, moved aside or found damaged)."""
        path = self.path_of(key)
        with _known_lock:
            _known.pop(path, None)
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _trustworthy(self, stamp: Stamp) -> bool:
        if time.time_ns() - stamp[4] >= RACY_NS:
            return True
        return fine_grained_ctimes(self.tmp_dir, stamp[0])


def fine_grained_ctimes(directory: Path, dev: int | None = None) -> bool:
    """Whether the file system of *directory* gives a file a new ctime at any change
    made after a stat (probed once per process and device; see :func:`_probe`).

    Where it does not, a stamp younger than :data:`RACY_NS` is never recorded, so
    files written in the last two seconds are hashed when read.
    """
    if dev is None:
        try:
            dev = os.stat(directory).st_dev
        except OSError:
            return False
    fine = _fine_grained.get(dev)
    if fine is None:
        fine = _fine_grained[dev] = _probe(Path(directory), dev)
    return fine


def _check(key: str, body: str) -> str:
    return blake3.blake3(f"{HEADER}{key}\n{body}".encode("ascii")).hexdigest()[:_CHECK_HEX]


def _parse(key: str, line: str) -> tuple[Stamp, list[str]] | None:
    body, _, check = line.rpartition(" ")
    parts = body.split(" ")
    if len(parts) != 6 or len(check) != _CHECK_HEX or _check(key, body) != check:
        return None
    try:
        stamp = (int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]))
    except ValueError:
        return None
    return stamp, parts[5].split(",")


def _own_stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _append(path: str, line: bytes) -> tuple[int, int, int]:
    """Append *line* to the record file at *path*; its (ino, size, mtime_ns) after."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        write_all(fd, memoryview(line))
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _probe(tmp_dir: Path, dev: int) -> bool:
    """Whether device *dev* gives a file a new ctime at a change made right after a stat.

    Linux 6.13+ does (multigrain timestamps) on ext4, xfs, btrfs and tmpfs; older
    kernels and many network file systems use the clock tick, so two changes a
    few microseconds apart share a ctime. Three changes in a row that each move
    the ctime leave no doubt (a tick boundary falls between two system calls
    once in thousands).
    """
    try:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        if os.stat(tmp_dir).st_dev != dev:
            return False  # the store spans file systems: no probe of that one
        path = tmp_dir / f"ctime-probe-{os.getpid()}-{uuid.uuid4().hex}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return False
    try:
        for mode in (0o444, 0o644, 0o444):
            before = os.fstat(fd).st_ctime_ns
            os.fchmod(fd, mode)
            if os.fstat(fd).st_ctime_ns == before:
                return False
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
