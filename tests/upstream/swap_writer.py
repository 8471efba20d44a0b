"""A pytest plugin putting memostore's SummaryWriter where TensorBoard's writers are imported from.

Loaded with ``-p swap_writer`` (this folder on ``PYTHONPATH``) by
``tests/test_upstream_tensorboard.py``, before the upstream test modules are
imported, so that their ``from torch.utils.tensorboard import SummaryWriter``
and ``from tensorboardX import SummaryWriter`` get memostore's class. Only the
packages' names are replaced: the original modules keep their own class, which
memostore uses when it writes event files too (``MEMOSTORE_EVENT_FILES``).
"""

from __future__ import annotations

import importlib

import memostore

for package in ("torch.utils.tensorboard", "tensorboardX"):
    try:
        module = importlib.import_module(package)
    except ImportError:
        continue
    module.SummaryWriter = memostore.SummaryWriter
