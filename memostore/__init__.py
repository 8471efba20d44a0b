"""memostore: a content-addressed artifact store in the style of git for PyTorch code.

``@memo`` keys each call by the digest of its arguments and of the code it
depends on, and returns the stored result on the next identical call, in this
process or a later one, on this machine or a teammate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import hf_datasets as _hf_datasets  # registers datasets' codecs (by type name)
from . import numpy_codec as _numpy_codec  # registers the ndarray codec
from . import paths as _paths  # registers the codec of @memo(files=...) arguments
from .code_deps import ignore_global
from .codecs import Codec, register_codec
from .errors import MemostoreError, MemostoreWarning
from .evaluation import Evaluation
from .hashcache import forget as forget_digest
from .immutable import register_immutable
from .memoize import memo
from .snapshot import Snapshot, snapshot
from .store import Store
from .trust import add_safe_globals
from .verbose import set_verbose

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

del _numpy_codec, _hf_datasets, _paths

# Metric logging pulls in numpy; load it on first use so that the CLI and
# scripts that never log start fast.
_LAZY = {"SummaryWriter": "memostore.metrics", "log": "memostore.metrics"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memostore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .metrics import SummaryWriter, log
