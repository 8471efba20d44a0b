"""Hook dictionaries of modules and optimizers, stored without their handle ids.

torch keys each hook by a handle id drawn from a process-wide counter, so the
ids of equal modules differ between processes (and with the number of hooks
made before). A value stores each hook dict as ``[[n, hook], ...]`` where ``n``
numbers the handle ids of one object in their order (the ``*_with_kwargs`` and
``*_always_called`` dicts refer to the same ids, so they stay consistent), and
restores it with fresh ids. The ``RemovableHandle`` objects a caller held do
not carry over.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from torch.utils.hooks import RemovableHandle


def is_hook_dict(name: str, value: Any) -> bool:
    """True for a ``*hooks*`` attribute holding a dict keyed by handle ids."""
    return "hooks" in name and isinstance(value, dict) and all(type(k) is int for k in value)


def encode_hooks(hooks: dict[str, dict[int, Any]], enc: Any) -> Any:
    """The node of an object's hook dicts, by attribute name, renumbered."""
    ids = sorted({k for h in hooks.values() for k in h})
    numbers = {hid: n for n, hid in enumerate(ids)}
    return enc.node({name: [[numbers[k], v] for k, v in h.items()] for name, h in hooks.items()})


def restore_hooks(stored: dict[str, list[list[Any]]]) -> dict[str, OrderedDict[int, Any]]:
    """Hook dicts by attribute name, with fresh handle ids."""
    out: dict[str, OrderedDict[int, Any]] = {}
    handle_ids: dict[int, int] = {}
    for name, entries in stored.items():
        hooks: OrderedDict[int, Any] = OrderedDict()
        for number, hook in entries:
            if number not in handle_ids:
                handle_ids[number] = RemovableHandle.next_id
                RemovableHandle.next_id += 1
            hooks[handle_ids[number]] = hook
        out[name] = hooks
    return out
