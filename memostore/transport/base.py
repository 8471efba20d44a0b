"""The transport contract: how a store's files reach a remote and come back.

A remote holds the same files as a store: immutable objects
(``objects/<2 hex>/<62 hex>``, written once, never modified) and small mutable
ref files under ``refs/``. A :class:`Transport` moves named files to and from
one remote and states, per method, what a concurrent reader or writer can
observe. It knows nothing about object ids or ref formats; push and pull are
built on top of it.

Names are ``/``-separated relative paths. They come from the remote itself
(``list``), so they are validated on every call: a hostile or damaged remote
cannot make a transport read or write outside its root.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..errors import RemoteError

__all__ = [
    "InvalidRemoteName",
    "NotFoundOnRemote",
    "RemoteError",
    "RemoteObjectTooLarge",
    "RemoteUnreachable",
    "Transport",
    "validate_name",
    "validate_prefix",
]


class NotFoundOnRemote(RemoteError, KeyError):
    """A name does not exist on the remote.

    Attributes:
        name: the missing name.
        url: the remote's URL.
    """

    def __init__(self, name: str, url: str) -> None:
        super().__init__(name)
        self.name = name
        self.url = url

    def __str__(self) -> str:
        return f"{self.name} does not exist on remote {self.url}"


class RemoteObjectTooLarge(RemoteError, ValueError):
    """A name on the remote holds more bytes than its kind ever needs; it was not read.

    Attributes:
        name: the name.
        url: the remote's URL.
        size: its size, as far as it was seen (at least ``limit + 1``).
        limit: the most bytes a file of its kind may hold.
    """

    def __init__(self, name: str, url: str, size: int, limit: int) -> None:
        super().__init__(
            f"{name} on remote {url} holds {size} bytes or more, more than the {limit} a file "
            "of its kind ever needs; it was not read (whoever writes the remote can fix it)"
        )
        self.name = name
        self.url = url
        self.size = size
        self.limit = limit


class RemoteUnreachable(RemoteError, ConnectionError):
    """The remote cannot be reached at all (network, endpoint, missing mount)."""


class InvalidRemoteName(RemoteError, ValueError):
    """A name is not a safe relative path inside the remote."""


def is_reserved(part: str) -> bool:
    # Leading dots are taken by temporary files, ".lock" by lock files and their
    # stale asides (``x.lock.stale-...``); a name must never collide with either.
    return part.startswith(".") or part.endswith(".lock") or ".lock." in part


def validate_name(name: str) -> str:
    """Return *name* if it is a valid transport name, else raise InvalidRemoteName.

    A valid name is a non-empty relative path of ``/``-separated parts: no
    leading ``/``, no backslash or control character, no empty part (``a//b``,
    trailing ``/``), no part that starts with ``.`` (this also rules out ``.``
    and ``..``) and no part ending in ``.lock`` or containing ``.lock.``.
    """
    if not isinstance(name, str):
        raise InvalidRemoteName(f"a remote name must be a str, not {type(name).__name__}")
    problem = _name_problem(name)
    if problem:
        raise InvalidRemoteName(f"invalid remote name {name!r}: {problem}")
    return name


def validate_prefix(prefix: str) -> str:
    """Return *prefix* if it can start valid names ("" and a trailing ``/`` allowed)."""
    if not isinstance(prefix, str):
        raise InvalidRemoteName(f"a remote prefix must be a str, not {type(prefix).__name__}")
    body = prefix[:-1] if prefix.endswith("/") else prefix
    if prefix and (problem := _name_problem(body)):
        raise InvalidRemoteName(f"invalid remote prefix {prefix!r}: {problem}")
    return prefix


def is_valid_name(name: str) -> bool:
    """True if :func:`validate_name` would accept *name* (used to filter listings)."""
    return isinstance(name, str) and not _name_problem(name)


def _name_problem(name: str) -> str | None:
    if not name:
        return "it is empty"
    if name.startswith("/"):
        return "absolute paths are not allowed"
    if "\\" in name:
        return "backslashes are not allowed"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "control characters are not allowed"
    for part in name.split("/"):
        if not part:
            return "empty path parts are not allowed"
        if part in (".", ".."):
            return "'.' and '..' are not allowed"
        if is_reserved(part):
            return "parts starting with '.' or ending in '.lock' are reserved"
    return None


def local_file(path: os.PathLike[str] | str) -> Path:
    """*path* as a Path, after checking it is a readable local file.

    A missing local file is the caller's mistake, not the remote's: it raises
    the plain ``FileNotFoundError``, before any remote error handling.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such local file: {path}")
    return path


def as_bytes_or_path(data: object) -> bytes | Path:
    """Normalise the ``data`` argument of ``add_if_new`` (bytes-like or a Path)."""
    if isinstance(data, Path):
        return local_file(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes or pathlib.Path, not {type(data).__name__}")


@dataclass(frozen=True)
class Listed:
    """One name of a listing, with what the remote says of it (None: it cannot say).

    Attributes:
        name: the name.
        size: its size in bytes.
        modified: when it was last written (Unix time, by the remote's clock).
    """

    name: str
    size: int | None = None
    modified: float | None = None


class Transport(ABC):
    """Moves named files to and from one remote.

    Every implementation passes the shared contract suite in
    ``tests/test_transport.py``. All methods may be called from several threads
    at once, and several processes (on several machines) may use the same
    remote at once.

    Attributes:
        url: the remote's canonical URL (``file:///...``, ``s3://bucket/prefix``).
    """

    url: str

    @abstractmethod
    def put_bytes(self, name: str, data: bytes) -> None:
        """Write *data* to *name*, replacing any previous content.

        Atomic: a concurrent reader sees the old or the new content whole,
        never a mix or a prefix.
        """

    @abstractmethod
    def put_file(self, name: str, path: Path) -> None:
        """Write the content of the local file *path* to *name*, streaming.

        Same guarantee as :meth:`put_bytes`; big files are never loaded into
        memory whole (multipart upload on S3).
        """

    @abstractmethod
    def add_if_new(self, name: str, data: bytes | Path, *, link: bool = False) -> bool:
        """Create *name* with *data* (bytes, or a local file to stream) if absent.

        For immutable, content-addressed objects. Returns True if this call
        created the file, False if it existed already (its content is then left
        untouched, and the upload is skipped when that can be known in advance).
        Readers never see a partial file.

        *link* says that the local file *data* never changes (an object of a
        store): a transport may then share it instead of copying it (a directory
        on the same file system hard-links it). Others ignore it.
        """

    @abstractmethod
    def get_bytes(self, name: str) -> bytes:
        """The whole content of *name*.

        Raises:
            NotFoundOnRemote: *name* does not exist (also a ``KeyError``).
        """

    def get_bytes_at_most(self, name: str, limit: int) -> bytes:
        """The content of *name*, if it holds at most *limit* bytes.

        For the small files a remote's writer controls (refs, leases, origin
        records): the size is checked before the content is read, and no more
        than ``limit + 1`` bytes are ever held. This default asks :meth:`stat`
        first; every transport of this package overrides it to check and read
        through one handle.

        Raises:
            NotFoundOnRemote: *name* does not exist.
            RemoteObjectTooLarge: it holds more than *limit* bytes.
        """
        size = self.stat(name)
        if size is None:
            raise NotFoundOnRemote(name, self.url)
        if size > limit:
            raise RemoteObjectTooLarge(name, self.url, size, limit)
        data = self.get_bytes(name)
        if len(data) > limit:
            raise RemoteObjectTooLarge(name, self.url, len(data), limit)
        return data

    @abstractmethod
    def get_file(self, name: str, dest: Path) -> None:
        """Download *name* to the local path *dest*, streaming.

        Writes a temporary file beside *dest* and renames it into place, so
        *dest* is never seen partial; missing parent directories are created.

        Raises:
            NotFoundOnRemote: *name* does not exist; *dest* is left as it was.
        """

    @abstractmethod
    def stat(self, name: str) -> int | None:
        """The size of *name* in bytes, or None if it does not exist."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Every name that starts with *prefix* (a plain string prefix), recursively.

        In no particular order. ``list("refs/")`` is every ref. Files that are
        not valid names (temporaries, lock files, folder markers) are skipped.
        """

    def scan(self, prefix: str = "") -> Iterator[Listed]:
        """Like :meth:`list`, with each name's size and modification time where known.

        gc of a remote deletes an unreachable object only once it is older than
        its grace period, which needs the time. This default knows neither
        (None); a transport that can tell cheaply overrides it.
        """
        for name in self.list(prefix):
            yield Listed(name)

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove *name*; idempotent (deleting a missing name is not an error)."""

    @abstractmethod
    def set_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        """Compare-and-swap a small file (a ref).

        Sets *name* to *new* only if its content is currently *old*
        (``old=None``: only if *name* does not exist). Returns True if the
        swap happened, False (changing nothing) if the content differed. Of
        several concurrent calls with the same *old*, at most one succeeds.
        """

    def delete_if_equals(self, name: str, old: bytes) -> bool:
        """Compare-and-delete a small file (a ref): remove *name* only if its
        content is currently *old*. Returns True if it went, False (changing
        nothing) if it differed or was missing. Against a concurrent
        :meth:`set_if_equals` of *name*, exactly one of the two takes effect.

        This default reads, then deletes: a write landing between the two is
        lost. Every transport of this package overrides it with a conditional
        delete; one that cannot should say so where it is documented.
        """
        try:
            current = self.get_bytes_at_most(name, len(old))
        except NotFoundOnRemote:
            return False
        except RemoteObjectTooLarge:
            return False
        if current != old:
            return False
        self.delete(name)
        return True

    def close(self) -> None:  # noqa: B027 - a no-op default is the right one
        """Release connections and other resources; idempotent."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def temp_name(base: str) -> str:
    """A hidden, unique file name beside *base* (a valid name never starts with '.')."""
    return f".{base[:80]}.{os.urandom(8).hex()}.tmp"
