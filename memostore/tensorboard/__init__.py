"""``from memostore.tensorboard import SummaryWriter``: the import-swap spelling.

Replacing ``from torch.utils.tensorboard import SummaryWriter`` with this line
is the only change a training script needs for its logs to land in the store.
"""

from __future__ import annotations

from ..metrics import SummaryWriter

__all__ = ["SummaryWriter"]
