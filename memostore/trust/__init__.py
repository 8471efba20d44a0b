"""What restoring a stored value may run: the decoding allowlist and origin records.

A store, local or pulled, is data. Decoding calls only the user's own classes
(pinned by digest) and the library constructors the registry lists
(:mod:`.registry`, extended with :func:`add_safe_globals`); it makes the
classes of families the user enabled (:mod:`.families`) from their state
without running their code (:mod:`.state`); and it loads code stored by value
only when this machine wrote it or pulled it from a trusted remote
(:mod:`.origins`), and only if it hashes to its digest. :mod:`.gate` is the one
place that decides. Whose results a hit serves at all is :mod:`.signers`'s to
say (ed25519 keys and signatures: :mod:`.signing`); :mod:`.sizes` says what
each call may allocate (charged to the decode budget before it runs).
``docs/reliability.md`` ("Decoding: what a stored value may run") lists the
rules for users and ``docs/threat-model.md`` what a remote's writer can and
cannot do.
"""

from __future__ import annotations

from .errors import UntrustedCode, UntrustedOrigin
from .families import ENV_STATE_FAMILIES, allow_state_family, register_state_family
from .registry import (
    DEFAULT_SAFE_GLOBALS,
    ENV_SAFE_GLOBALS,
    add_safe_globals,
    get_safe_globals,
    register_safe_rule,
    safe_globals,
)
from .sizes import register_sizer

__all__ = [
    "DEFAULT_SAFE_GLOBALS",
    "ENV_SAFE_GLOBALS",
    "ENV_STATE_FAMILIES",
    "UntrustedCode",
    "UntrustedOrigin",
    "add_safe_globals",
    "allow_state_family",
    "get_safe_globals",
    "register_safe_rule",
    "register_sizer",
    "register_state_family",
    "safe_globals",
]
