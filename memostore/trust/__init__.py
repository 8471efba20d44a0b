"""What restoring a stored value may run: the decoding allowlist and origin records.

A store, local or pulled, is data. Decoding calls only the user's own code
(pinned by digest), the library constructors the registry lists
(:mod:`.registry`, extended with :func:`add_safe_globals`), and code stored
by value that this machine wrote or pulled from a trusted remote
(:mod:`.origins`). :mod:`.gate` is the one place that decides;
``docs/reliability.md`` ("Decoding: what a stored value may run") lists the
rules for users.
"""

from __future__ import annotations

from .errors import UntrustedCode, UntrustedOrigin
from .registry import (
    DEFAULT_SAFE_GLOBALS,
    ENV_SAFE_GLOBALS,
    add_safe_globals,
    get_safe_globals,
    register_safe_rule,
    safe_globals,
)

__all__ = [
    "DEFAULT_SAFE_GLOBALS",
    "ENV_SAFE_GLOBALS",
    "UntrustedCode",
    "UntrustedOrigin",
    "add_safe_globals",
    "get_safe_globals",
    "register_safe_rule",
    "safe_globals",
]
