"""An in-memory remote: the twin of the real transports, for tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from ..odb.fsutil import write_atomically
from .base import (
    NotFoundOnRemote,
    RemoteObjectTooLarge,
    Transport,
    as_bytes_or_path,
    local_file,
    validate_name,
    validate_prefix,
)

# memory://NAME remotes opened by URL share their files within one process.
_NAMED: dict[str, MemoryTransport] = {}
_NAMED_LOCK = threading.Lock()


class MemoryTransport(Transport):
    """A remote held in a dict; every operation is atomic under one lock.

    Args:
        name: when given, the URL is ``memory://NAME``; :func:`named` returns
            the same instance for the same name within a process.
    """

    def __init__(self, name: str = "") -> None:
        self.url = f"memory://{name}"
        self._files: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str) -> MemoryTransport:
        """The process-wide memory remote called *name* (created on first use)."""
        with _NAMED_LOCK:
            if name not in _NAMED:
                _NAMED[name] = cls(name)
            return _NAMED[name]

    def put_bytes(self, name: str, data: bytes) -> None:
        validate_name(name)
        data = bytes(data)
        with self._lock:
            self._files[name] = data

    def put_file(self, name: str, path: Path) -> None:
        validate_name(name)
        data = local_file(path).read_bytes()
        with self._lock:
            self._files[name] = data

    def add_if_new(self, name: str, data: bytes | Path, *, link: bool = False) -> bool:
        validate_name(name)
        data = as_bytes_or_path(data)
        with self._lock:
            if name in self._files:
                return False
        content = data.read_bytes() if isinstance(data, Path) else data
        with self._lock:
            # Checked again: another thread may have added it while we read the file.
            if name in self._files:
                return False
            self._files[name] = content
            return True

    def get_bytes(self, name: str) -> bytes:
        validate_name(name)
        with self._lock:
            try:
                return self._files[name]
            except KeyError:
                raise NotFoundOnRemote(name, self.url) from None

    def get_bytes_at_most(self, name: str, limit: int) -> bytes:
        data = self.get_bytes(name)
        if len(data) > limit:
            raise RemoteObjectTooLarge(name, self.url, len(data), limit)
        return data

    def get_file(self, name: str, dest: Path) -> None:
        data = self.get_bytes(name)
        write_atomically(Path(dest), data, fsync=False)

    def stat(self, name: str) -> int | None:
        validate_name(name)
        with self._lock:
            data = self._files.get(name)
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        with self._lock:
            names = [n for n in self._files if n.startswith(prefix)]
        return iter(names)

    def delete(self, name: str) -> None:
        validate_name(name)
        with self._lock:
            self._files.pop(name, None)

    def delete_if_equals(self, name: str, old: bytes) -> bool:
        validate_name(name)
        with self._lock:
            if self._files.get(name) != old:
                return False
            del self._files[name]
            return True

    def set_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        validate_name(name)
        new = bytes(new)
        with self._lock:
            if self._files.get(name) != old:
                return False
            self._files[name] = new
            return True
