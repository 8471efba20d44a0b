"""The exception hierarchy of memostore.

Every error raised on purpose derives from :class:`MemostoreError`, and also
from the built-in exception a caller would naturally catch (a missing object is
a ``KeyError``, a corrupt one a ``ValueError``), so generic handlers keep
working. Messages say how to fix the problem where there is a fix.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


# What a terminal would act on rather than show: C0 controls but the tab, DEL, C1
# controls (U+009B is a one-character CSI), and the bidirectional overrides that
# make text read in another order than it runs.
_CONTROLS = (*range(0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0))
_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ONE_LINE = {c: _escape(c) for c in (*_CONTROLS, *_BIDI)}
_LINES = {c: v for c, v in _ONE_LINE.items() if c != 0x0A}


def printable(text: object, *, lines: bool = False) -> str:
    """*text* as a terminal may show it: control characters and ESC written as escapes.

    Every string a store holds may come from someone else (a pulled record's
    arguments, host, tags), and a terminal acts on escape sequences: OSC 0 sets
    the window's title, OSC 52 writes the clipboard. Whatever reaches a
    terminal goes through here: ``"\\x1b]0;t\\x07"`` is shown as ``\\x1b]0;t\\x07``,
    a C1 control as ``\\u009b``. Tabs are kept; newlines only with *lines*
    (a block of text made of lines, as a message or a diff is).
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case, checked in C
        return s
    return s.translate(_LINES if lines else _ONE_LINE)


class MemostoreError(Exception):
    """Root of every error memostore raises on purpose.

    Its text is :func:`printable`: a message quoting a stored string never
    carries a terminal's escape sequence to wherever it is printed.
    """

    def __str__(self) -> str:
        return printable(super().__str__(), lines=True)


class MemostoreWarning(Warning):
    """Something was not stored or not restored; the computation went on.

    A ``Warning`` but not a ``UserWarning``: ``filterwarnings("ignore",
    category=UserWarning)``, common in training scripts, does not silence it.
    Its text is :func:`printable`, as an error's is.
    """

    def __str__(self) -> str:
        return printable(super().__str__(), lines=True)


# A warning is attributed to the first frame outside these packages (and the
# context managers they run through): the user's line, whatever the depth.
_OUR_PACKAGES = frozenset({"memostore", "memostore_cli", "torch_codecs", "contextlib"})


def warn(message: str) -> None:
    """Issue every :class:`MemostoreWarning`: at the first frame outside memostore."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # the caller of warn()
    while frame is not None and frame.f_back is not None and _is_ours(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"memostore: {message}", MemostoreWarning, stacklevel=level)


def _is_ours(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and name.partition(".")[0] in _OUR_PACKAGES


def install_hint(extra: str) -> str:
    """How to install the optional packages of *extra* (memostore installs from a clone)."""
    return f"run pip install '.[{extra}]' in your memostore clone"


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
