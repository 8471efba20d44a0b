"""Hook dictionaries of modules and optimizers, stored without their handle ids.

torch keys each hook by a handle id drawn from a process-wide counter, so the
ids of equal modules differ between processes (and with the number of hooks
made before). A value stores each hook dict as ``[[n, hook], ...]`` where ``n``
numbers the handle ids of one object in their order (the ``*_with_kwargs`` and
``*_always_called`` dicts refer to the same ids, so they stay consistent), and
restores it with fresh ids. The ``RemovableHandle`` objects a caller held do
not carry over.

A hook registered through torch's ``_WrappedHook`` (``load_state_dict`` pre
hooks, such as the one ``weight_norm`` adds) is stored as the hook it wraps and
whether it is given its module, which is the module holding it; it is
restored by setting those attributes, without running the wrapper's own
``__setstate__``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from memostore.errors import DecodeError, EncodeError
from memostore.values.codecs import Codec

# The module whose hooks are being encoded or decoded (scratch key of the document).
HOOK_OWNER = "torch.hook_owner"
_WrappedHook = getattr(torch.nn.modules.module, "_WrappedHook", None)
_WRAPPER_ATTRIBUTES = ("__module__", "__name__", "__qualname__", "__doc__")


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


class WrappedHookCodec(Codec):
    """torch's ``_WrappedHook``: the hook, and whether it is called with its module."""

    tag = "torch.wrapped_hook"
    type_names = ("torch.nn.modules.module._WrappedHook",)

    def encode(self, wrapper: Any, enc: Any) -> dict[str, Any]:
        node: dict[str, Any] = {"hook": enc.node(wrapper.hook)}
        if wrapper.with_module:
            module = wrapper.module()
            if module is None or module is not enc.scratch.get(HOOK_OWNER):
                raise EncodeError(
                    "a module holds a hook bound to another module (or to a dead one); remove "
                    "the hook before storing it"
                )
            node["own_module"] = True
        return node

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        if _WrappedHook is None:
            raise DecodeError("this torch has no _WrappedHook to restore a module hook into")
        hook = dec.node(node["hook"])
        wrapper = _WrappedHook.__new__(_WrappedHook)
        attrs = wrapper.__dict__
        for name in _WRAPPER_ATTRIBUTES:  # what functools.update_wrapper copies
            value = getattr(hook, name, None)
            if value is not None:
                attrs[name] = value
        attrs["__wrapped__"] = hook
        attrs["hook"] = hook
        attrs["with_module"] = bool(node.get("own_module"))
        if node.get("own_module"):
            owner = dec.scratch.get(HOOK_OWNER)
            if owner is None:
                raise DecodeError("a module hook bound to its module, outside any module")
            attrs["module"] = weakref.ref(owner)
        return wrapper
