"""Files of JSON lines that many processes append to: the store's caches and records.

The evaluation index, the links cache and the last-use log share one scheme:
each batch of lines is appended with one ``write`` on a descriptor opened with
``O_APPEND``, so lines of concurrent writers never interleave; a line torn by a
crash fails to parse and is skipped by every reader; a compaction replaces the
whole file with ``fsutil.write_atomically``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def append(path: Path, data: bytes) -> None:
    """Append *data* (whole lines) to *path* in one write, creating it and its directory.

    Raises:
        OSError: the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # One write per batch: O_APPEND keeps concurrent writers' lines whole.
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def parse(data: bytes) -> list[Any]:
    """The values of the lines of *data* that parse; torn or damaged lines are skipped."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return []
    try:
        # One parse of the whole text is several times faster than one per line.
        return json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, RecursionError):
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except (ValueError, RecursionError):
                continue  # torn by a crash mid-append
        return parsed
