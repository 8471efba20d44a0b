"""The exception hierarchy of memostore.

Every error raised on purpose derives from :class:`MemostoreError`, and also
from the built-in exception a caller would naturally catch (a missing object is
a ``KeyError``, a corrupt one a ``ValueError``), so generic handlers keep
working. Messages say how to fix the problem where there is a fix.
"""

from __future__ import annotations


class MemostoreError(Exception):
    """Root of every error memostore raises on purpose."""


class MemostoreWarning(Warning):
    """Something was not stored or not restored; the computation went on.

    A ``Warning`` but not a ``UserWarning``: ``filterwarnings("ignore",
    category=UserWarning)``, common in training scripts, does not silence it.
    """


class RemoteError(MemostoreError):
    """A remote could not do what was asked (root of all transport errors)."""


class ObjectNotFound(MemostoreError, KeyError):
    """An object id is not in the object database."""

    def __init__(self, object_id: str) -> None:
        super().__init__(object_id)
        self.object_id = object_id

    def __str__(self) -> str:
        return f"object {self.object_id} is not in the store"


class CorruptObject(MemostoreError, ValueError):
    """An object's bytes do not hash to its id.

    Attributes:
        object_id: the id the object is stored under (what was expected).
        actual: the digest of the bytes actually read.
        path: where the bad bytes were read from, when known.
    """

    def __init__(self, object_id: str, actual: str, path: str | None = None) -> None:
        self.object_id = object_id
        self.expected = object_id
        self.actual = actual
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(
            f"corrupt object {object_id}{where}: its bytes hash to {actual}; "
            "run `memostore fsck` to list damage, and call the function again to recompute it"
        )


class MalformedObject(MemostoreError, ValueError):
    """An object hashes correctly but is not a valid encoding of its kind."""


class RefError(MemostoreError):
    """A ref name is invalid or a ref file is damaged."""


class LockTimeout(MemostoreError, TimeoutError):
    """A lock file could not be taken in time."""

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"timed out waiting for lock {path} held by {holder}; if that process is gone, "
            f"remove the lock file"
        )


class StoreNotFound(MemostoreError, FileNotFoundError):
    """No store exists where one was asked for."""


class EncodeError(MemostoreError, TypeError):
    """A value cannot be encoded (hashed or stored)."""


class GradientGraphError(EncodeError):
    """A value holds a tensor attached to an autograd graph (it has a ``grad_fn``).

    A stored copy would come back detached: ``loss.backward()`` through it
    would not reach what made it. Such a value is never stored.
    """


class DecodeError(MemostoreError, ValueError):
    """A stored value cannot be restored."""


class DecodeBudgetExceeded(DecodeError):
    """Restoring a stored value would build more than its bytes allow (``values/budget.py``)."""


class StaleCode(DecodeError):
    """A stored value refers to a function or class whose code has changed since.

    A result holding such a reference is treated as a miss: it is recomputed,
    never returned stale.
    """

    def __init__(self, symbol: str, stored: str, current: str) -> None:
        self.symbol = symbol
        self.stored = stored
        self.current = current
        super().__init__(
            f"{symbol} has changed since the value was stored "
            f"(stored code {stored[:12]}, now {current[:12]})"
        )


class RevisionNotFound(MemostoreError, KeyError):
    """A revision (evaluation id, prefix or function name) names no evaluation."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "revision not found"
