"""Refusals of the decoding gate: a stored value names code memostore will not run."""

from __future__ import annotations

from ..errors import DecodeError, StaleCode


class UntrustedCode(StaleCode):
    """A stored value needs a callable, class or module that restoring may not use.

    The gate warns once per symbol and process before raising it. It derives
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
