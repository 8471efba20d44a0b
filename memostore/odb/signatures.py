"""Signature files: the signatures of each evaluation, beside the object database.

A signature names an evaluation by id, so it cannot live inside that
evaluation (its id would change); like a git signed tag it sits beside it::

    sigs/<evaluation id>      one signature a line (``trust/signing.py``)

This module only stores lines of bytes; what they mean, and whether one
holds, is :mod:`memostore.trust.signing`'s to say. A file is read for at most
``MAX_BYTES`` and holds at most ``MAX_LINES`` lines, whoever wrote it. Adding a
line rewrites the file whole (temp file, rename), so a reader never sees half a
line. Files are not fsynced: a signature lost in a crash is written again by
the next ``push`` of that evaluation.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from .fsutil import write_atomically
from .objects import is_object_id

SIGS_DIR = "sigs"
MAX_BYTES = 4096
MAX_LINES = 8


def signature_name(evaluation_id: str) -> str:
    """The path of an evaluation's signatures relative to a store or remote root."""
    return f"{SIGS_DIR}/{evaluation_id}"


def split_lines(data: bytes) -> list[bytes]:
    """The non-empty lines of a signature file, at most ``MAX_LINES``, without newlines."""
    return [line.strip() for line in data[:MAX_BYTES].split(b"\n") if line.strip()][:MAX_LINES]


class SignatureFiles:
    """The signature files of one store: ``sigs/`` under its root, or a dict in memory."""

    def __init__(self, root: Path | None) -> None:
        self._dir = root / SIGS_DIR if root is not None else None
        self._memory: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()

    def lines(self, evaluation_id: str) -> list[bytes]:
        """The signature lines stored for *evaluation_id* (empty when none)."""
        if not is_object_id(evaluation_id):
            return []
        if self._dir is None:
            with self._lock:
                return list(self._memory.get(evaluation_id, ()))
        try:
            fd = os.open(self._dir / evaluation_id, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            return split_lines(os.read(fd, MAX_BYTES))
        except OSError:
            return []
        finally:
            os.close(fd)

    def add(self, evaluation_id: str, new: Iterable[bytes]) -> bool:
        """Add the lines of *new* not stored yet; returns whether the file changed."""
        if not is_object_id(evaluation_id):
            return False
        have = self.lines(evaluation_id)
        merged = list(have)
        for line in new:
            line = line.strip()
            if line and b"\n" not in line and line not in merged:
                merged.append(line)
        merged = merged[:MAX_LINES]
        if merged == have:
            return False
        if self._dir is None:
            with self._lock:
                self._memory[evaluation_id] = merged
            return True
        # Made durable with the evaluation's objects by the barrier before its ref
        # moves (a lost signature of a local evaluation is re-made by push).
        data = b"".join(line + b"\n" for line in merged)
        write_atomically(self._dir / evaluation_id, data, fsync=False)
        return True

    def ids(self) -> Iterator[str]:
        """Every evaluation id that has a signature file."""
        if self._dir is None:
            with self._lock:
                yield from list(self._memory)
            return
        try:
            names = os.listdir(self._dir)
        except OSError:
            return
        yield from (name for name in names if is_object_id(name))

    def remove(self, evaluation_id: str) -> None:
        """Forget the signatures of *evaluation_id* (gc, once the evaluation is gone)."""
        if self._dir is None:
            with self._lock:
                self._memory.pop(evaluation_id, None)
            return
        if is_object_id(evaluation_id):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._dir / evaluation_id)
