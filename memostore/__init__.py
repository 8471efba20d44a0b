"""memostore: a content-addressed artifact store in the style of git for PyTorch code.

``@memo`` keys each call by the digest of its arguments and of the code it
depends on, and returns the stored result on the next identical call, in this
process or a later one, on this machine or a teammate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import MemostoreError, MemostoreWarning

# Registrations every entry point relies on, and cheap (neither numpy nor torch):
# code digests key data globals by value digests, and the codecs memostore ships.
from .values import builtin_codecs as _builtin_codecs
from .values import hashing as _hashing

del _builtin_codecs, _hashing

__version__ = "0.1.0"

__all__ = [
    "Codec",
    "Evaluation",
    "MemostoreError",
    "MemostoreWarning",
    "Snapshot",
    "Store",
    "SummaryWriter",
    "__version__",
    "add_safe_globals",
    "forget_digest",
    "ignore_global",
    "log",
    "memo",
    "register_codec",
    "register_immutable",
    "set_verbose",
    "snapshot",
]


def _load() -> dict[str, Any]:
    """The public names, with every codec and hook registered (on first use of any).

    ``import memostore`` stays as cheap as its errors; the CLI reaches the wings
    it needs directly and never pays for torch.distributed, numpy or the codecs.
    """
    # For their registrations: how a rank makes a memoised call (call/ranks.py), code
    # digests of data globals, and the codecs of datasets, loggers, ndarrays and files.
    from . import distributed  # noqa: F401
    from .call.memoize import memo  # noqa: F401
    from .call.verbose import set_verbose  # noqa: F401
    from .code.deps import ignore_global  # noqa: F401
    from .odb.store import Store  # noqa: F401
    from .records.evaluation import Evaluation  # noqa: F401
    from .trust import add_safe_globals  # noqa: F401
    from .values import builtin_codecs, hashing  # noqa: F401
    from .values.codecs import Codec, register_codec  # noqa: F401
    from .values.hashcache import forget as forget_digest  # noqa: F401
    from .values.immutable import register_immutable  # noqa: F401
    from .values.snapshot import Snapshot, snapshot  # noqa: F401

    names = locals()
    return {name: names[name] for name in __all__ if name in names}


# Metric logging pulls in numpy: loaded apart, on its own first use.
_METRICS = {"SummaryWriter", "log"}


def __getattr__(name: str) -> Any:
    if name in _METRICS:
        from . import metrics

        value = getattr(metrics, name)
        globals()[name] = value
        return value
    if name not in __all__:
        # Submodules, dunders, typos: never load everything for them (``from . import
        # metrics`` asks here before it imports the submodule).
        raise AttributeError(f"module 'memostore' has no attribute {name!r}")
    names = _load()
    globals().update(names)
    if name not in names:
        raise AttributeError(f"module 'memostore' has no attribute {name!r}")
    return names[name]


if TYPE_CHECKING:
    from . import distributed as distributed
    from .call.memoize import memo
    from .call.verbose import set_verbose
    from .code.deps import ignore_global
    from .metrics import SummaryWriter, log
    from .odb.store import Store
    from .records.evaluation import Evaluation
    from .trust import add_safe_globals
    from .values.codecs import Codec, register_codec
    from .values.hashcache import forget as forget_digest
    from .values.immutable import register_immutable
    from .values.snapshot import Snapshot, snapshot
