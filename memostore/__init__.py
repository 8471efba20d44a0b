"""memostore: a content-addressed artifact store in the style of git for PyTorch code.

``@memo`` keys each call by the digest of its arguments and of the code it
depends on, and returns the stored result on the next identical call, in this
process or a later one, on this machine or a teammate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# torch.distributed jobs: registers how a rank makes a memoised call (call/ranks.py).
from . import distributed as distributed
from .call.memoize import memo
from .call.verbose import set_verbose
from .code.deps import ignore_global
from .errors import MemostoreError, MemostoreWarning
from .odb.store import Store
from .records.evaluation import Evaluation
from .trust import add_safe_globals
from .values import hashing as _hashing  # code digests key data globals by value digests
from .values import hf_datasets as _hf_datasets  # registers datasets' codecs (by type name)
from .values import hf_tokenizers as _hf_tokenizers  # registers tokenizers' codecs (by type name)
from .values import loggers as _loggers  # registers the logging.Logger codec
from .values import numpy_codec as _numpy_codec  # registers the ndarray codec
from .values import omegaconf_codec as _omegaconf_codec  # registers OmegaConf's (by type name)
from .values import pandas_codec as _pandas_codec  # registers DataFrame's codecs (by type name)
from .values import paths as _paths  # registers the codec of @memo(files=...) arguments
from .values.codecs import Codec, register_codec
from .values.hashcache import forget as forget_digest
from .values.immutable import register_immutable
from .values.snapshot import Snapshot, snapshot

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

del _hashing, _numpy_codec, _omegaconf_codec, _pandas_codec
del _hf_datasets, _hf_tokenizers, _loggers, _paths

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
