"""Refusals of the decoding gate: a stored value names code memostore will not run.

:func:`refuse` raises :class:`UntrustedCode`, with the fix in its message;
every part of the gate refuses through it. A memoised call that meets it warns
once per function and reason (:func:`warn_once`, at the user's call line), so
that a hit meeting the same value again is a quiet miss.
"""

from __future__ import annotations

import threading
from typing import Any, NoReturn

from ..errors import DecodeError, StaleCode, warn

_warned: set[Any] = set()
_lock = threading.Lock()


class UntrustedCode(StaleCode):
    """A stored value needs a callable, class or module that restoring may not use.

    A memoised call warns once per function and reason when it meets it. It derives
    from :class:`StaleCode` because a memo hit treats both alike and quietly:
    the call computes, as for code that changed since the value was stored,
    and the warning is not repeated on every call that meets the same value.

    Attributes:
        symbol: ``module:qualname`` (or the module's name) that was refused.
        fix: the command or call that would allow it, for the message.
    """

    def __init__(self, symbol: str, message: str, fix: str = "") -> None:
        DecodeError.__init__(self, message)
        self.symbol = symbol
        self.stored = ""
        self.current = ""
        self.fix = fix


class UntrustedOrigin(UntrustedCode):
    """Code stored by value came from a remote that is not trusted: it is not unpickled.

    Attributes:
        source: the remote's URL.
        remote: the configured remote's name ("" when none has that URL).
    """

    def __init__(self, symbol: str, message: str, fix: str, source: str, remote: str) -> None:
        super().__init__(symbol, message, fix)
        self.source = source
        self.remote = remote


def refuse(symbol: str, why: str, fix: str, what: str = "code") -> NoReturn:
    """Raise UntrustedCode, whose message says why and how to allow it.

    Whoever meets the refusal says it to the user: a memoised call warns once
    per function and reason (``memostore/call/memoize.py``), a direct restore
    raises it.
    """
    needs = "holds the module" if what == "module" else "needs"
    message = (
        f"a stored value {needs} {symbol}, which memostore does not run to restore a value "
        f"({why}); the stored result is not used"
    )
    if fix:
        message += f". {fix[0].upper()}{fix[1:]}"
    raise UntrustedCode(symbol, message, fix)


def warn_once(key: Any, message: str) -> None:
    """One MemostoreWarning per *key* and process, attributed to the user's call."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warn(message)
