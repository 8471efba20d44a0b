"""In-place replay of torch values: how a hit leaves the caller's objects as a miss did.

``memostore/effects/replay.py`` plans updates of a caller's objects from their
restored post-call state. These are its rules for torch types:

* a tensor is copied into (``copy_`` under ``no_grad``, which moves its version
  counter as any in-place write does); one whose shape or dtype changed gets
  the restored storage (``t.data = ...``), as ``nn.Module._apply`` does;
* a module is updated through its ``__dict__``: its registered parameters,
  buffers and submodules keep their identity and get their values, every
  other attribute (``training`` above all) is set, and hook dicts are left as
  they are unless the hooks themselves changed;
* an optimizer's parameters, groups, defaults and per-parameter state are
  matched position by position (``state_dict`` order) to its own parameters,
  so that it stays bound to the caller's model;
* a scheduler is updated through its ``__dict__`` (its optimizer is the
  caller's, updated as above), keeping the weak references it does not store;
* a generator gets the restored state;
* a result that the miss made as a view of an argument's tensor (``x[:2]``,
  ``x.detach()``) is made again as that view of the caller's tensor
  (:func:`tensor_memory`, :func:`tensor_view`).

Parts the hash cache proves unchanged (a dataset passed through, a frozen
layer) are not copied at all.
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.effects.replay import MISSING, NotReplayable, Planner
from memostore.values.codecs import Memory
from memostore.values.hashcache import digest_cache

from .dtypes import dtype_name, tensor_dtype
from .fingerprints import leaf_grad, tensor_data_state
from .hooks import is_hook_dict
from .params import params_in

# Compared by value when no cached digest proves them equal: cheaper than a copy.
_COMPARE_MAX_BYTES = 1 << 16


def tensor_unchanged(t: torch.Tensor, s: torch.Tensor) -> bool:
    if (
        type(t) is not type(s)
        or t.device != s.device
        or t.dtype != s.dtype
        or t.shape != s.shape
        or t.requires_grad != s.requires_grad
        or t.layout != torch.strided
        or s.layout != torch.strided
        or t.__dict__
        or s.__dict__
        or leaf_grad(t) is not None
        or leaf_grad(s) is not None
    ):
        return False
    state_t, state_s = tensor_data_state(t), tensor_data_state(s)
    if state_t is not None and state_s is not None:
        blob = digest_cache.get(t, state_t)
        if blob is not None and blob == digest_cache.get(s, state_s):
            return True
    if t.numel() * t.element_size() <= _COMPARE_MAX_BYTES:
        return bool(torch.equal(t.detach(), s.detach()))
    return False


def assign_tensor(t: torch.Tensor, s: torch.Tensor, plan: Planner) -> bool:
    if t.layout != torch.strided or s.layout != torch.strided:
        raise NotReplayable(f"a {t.layout} tensor cannot be updated in place")
    if t.is_inference() and not torch.is_inference_mode_enabled():
        raise NotReplayable("an inference tensor cannot be updated outside inference mode")
    if t.shape == s.shape and t.dtype == s.dtype:
        plan.op(lambda: _copy_into(t, s))
    else:
        plan.op(lambda: _rebind(t, s))
    if t.requires_grad != s.requires_grad:
        if not t.is_leaf:
            raise NotReplayable("a non-leaf tensor's requires_grad cannot be changed")
        plan.op(lambda: t.requires_grad_(s.requires_grad))
    if t.__dict__ or s.__dict__:
        plan.namespace(t.__dict__, dict(s.__dict__))
    if leaf_grad(t) is not None or leaf_grad(s) is not None:
        if not t.is_leaf:
            raise NotReplayable("a non-leaf tensor's .grad cannot be set")
        grad = leaf_grad(s)  # it fits s (torch checked), which t becomes first
        plan.op(lambda: _set_grad(t, grad))
    return True


def _set_grad(t: torch.Tensor, grad: torch.Tensor | None) -> None:
    """The gradient the miss left (None included): a later ``opt.step()`` uses it."""
    t.grad = None if grad is None else grad.to(t.device)


def _copy_into(t: torch.Tensor, s: torch.Tensor) -> None:
    blob = _known_blob(s)
    with torch.no_grad():
        t.copy_(s)
    _adopt(t, blob)


def _rebind(t: torch.Tensor, s: torch.Tensor) -> None:
    blob = _known_blob(s)
    with torch.no_grad():
        t.data = s.detach().to(t.device)
    _adopt(t, blob)


def _known_blob(s: torch.Tensor) -> str | None:
    state = tensor_data_state(s)
    return None if state is None else digest_cache.get(s, state)


def _adopt(t: torch.Tensor, blob: str | None) -> None:
    """*t* now holds the bytes of the restored tensor whose blob is *blob*: its digest.

    A blob's id is a function of dtype, shape and bytes, all now equal, so the
    next key of the caller's model need not hash its weights again.
    """
    if blob is None:
        return
    state = tensor_data_state(t)
    if state is not None:
        digest_cache.put(t, state, blob)


def tensor_memory(t: torch.Tensor) -> Memory | None:
    """The bytes *t* spans in its storage, for plain tensors and parameters with data."""
    if (
        type(t) not in _VIEWABLE
        or t.layout != torch.strided
        or t.is_meta
        or t.numel() == 0
        or t.is_conj()
        or t.is_neg()
    ):
        return None
    storage = t.untyped_storage()
    itemsize = t.element_size()
    start = t.storage_offset() * itemsize
    end = (
        start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) + 1) * itemsize
    )
    layout = {
        "dtype": dtype_name(t.dtype),
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "offset": start,
        "param": type(t) is torch.nn.Parameter,
        "requires_grad": t.requires_grad,
    }
    return Memory(("torch", str(t.device), storage.data_ptr()), start, end, layout)


_VIEWABLE = (torch.Tensor, torch.nn.Parameter)


def tensor_view(base: torch.Tensor, base_layout: Any, layout: Any) -> torch.Tensor | None:
    """The tensor *layout* describes, over the storage of the caller's tensor *base*."""
    if not isinstance(base, torch.Tensor) or base.layout != torch.strided:
        return None
    if (
        dtype_name(base.dtype) != base_layout["dtype"]
        or list(base.shape) != base_layout["shape"]
        or list(base.stride()) != base_layout["stride"]
    ):
        return None
    dtype = tensor_dtype(layout["dtype"])
    itemsize = torch.empty(0, dtype=dtype).element_size()
    offset = base.storage_offset() * base.element_size() + layout["offset"] - base_layout["offset"]
    if offset < 0 or offset % itemsize:
        return None
    with torch.no_grad():
        out = torch.empty(0, dtype=dtype, device=base.device)
        out.set_(base.untyped_storage(), offset // itemsize, layout["shape"], layout["stride"])
    if layout.get("param"):
        return torch.nn.Parameter(out, requires_grad=bool(layout.get("requires_grad")))
    if layout.get("requires_grad"):
        out.requires_grad_(True)
    return out


def assign_module(m: torch.nn.Module, s: torch.nn.Module, plan: Planner) -> bool:
    target = m.__dict__
    state: dict[str, Any] = {}
    for name, value in s.__dict__.items():
        old = target.get(name, MISSING)
        if is_hook_dict(name, value) and isinstance(old, dict) and _same_hooks(old, value):
            state[name] = old  # the same hooks: keep the handles the caller holds valid
        else:
            state[name] = value
    plan.namespace(target, state)
    return True


def _same_hooks(old: dict[Any, Any], new: dict[Any, Any]) -> bool:
    return len(old) == len(new) and all(
        a is b for a, b in zip(old.values(), new.values(), strict=True)
    )


def assign_optimizer(
    o: torch.optim.Optimizer, s: torch.optim.Optimizer, plan: Planner, split: Any
) -> bool:
    groups = len(o.param_groups)
    if len(s.param_groups) < groups:
        raise NotReplayable("the optimizer lost parameter groups: it cannot be updated in place")
    mine = params_in(o.param_groups)
    theirs = params_in(s.param_groups[:groups])
    if len(mine) != len(theirs):
        raise NotReplayable(
            "the optimizer's parameters changed in number: it cannot be updated in place"
        )
    for p, q in zip(mine, theirs, strict=True):
        if plan.value(p, q) is not p:
            raise NotReplayable("an optimizer parameter would have to be replaced")
    position = {id(p): i for i, p in enumerate(mine)}
    theirs_position = {id(q): i for i, q in enumerate(theirs)}
    with plan.descend(("a", "param_groups")):
        for i, (group, other) in enumerate(zip(o.param_groups, s.param_groups, strict=False)):
            if [position.get(id(p)) for p in group["params"]] != [
                theirs_position.get(id(q)) for q in other["params"]
            ]:
                raise NotReplayable("the optimizer's parameter groups were rearranged")
            wanted = {k: v for k, v in other.items() if k != "params"}
            wanted["params"] = group["params"]
            with plan.descend(("i", i)):
                plan.dict_items(group, wanted)
        # Groups the body added (``add_param_group``), bound to the caller's own
        # parameters where the miss's were the arguments' (``effects/identity.py``),
        # which rebinds them inside the restored groups too: their state is keyed
        # by the restored parameters, taken first.
        stored_added = params_in(s.param_groups[groups:])
        added = [
            plan.value(MISSING, other, ("i", groups + i))
            for i, other in enumerate(s.param_groups[groups:])
        ]
    if added:
        plan.op(lambda: o.param_groups.extend(added))
    pairs = list(zip(mine, theirs, strict=True))
    pairs += zip(params_in(added), stored_added, strict=True)
    states: list[Any] = []
    for p, q in pairs:
        theirs_state = s.state.get(q)
        states.append(
            None if not theirs_state else plan.value(o.state.get(p, MISSING), theirs_state)
        )

    def apply_state() -> None:
        for (p, _), state in zip(pairs, states, strict=True):
            if state is None:
                o.state.pop(p, None)
            else:
                o.state[p] = state

    plan.op(apply_state)
    plan.dict_items(o.defaults, s.defaults)
    _, extra_target = split(o)
    _, extra_source = split(s)
    for name, value in extra_source.items():
        old = extra_target.get(name, MISSING)
        new = plan.value(old, value, ("a", name))
        if new is not old:
            plan.op(lambda name=name, new=new: o.__dict__.__setitem__(name, new))
    for name in extra_target:
        if name not in extra_source:
            plan.op(lambda name=name: o.__dict__.pop(name, None))
    return True


def assign_scheduler(sched: Any, s: Any, plan: Planner, weak_types: tuple[type, ...]) -> bool:
    state = dict(s.__dict__)
    for name, value in sched.__dict__.items():
        if isinstance(value, weak_types) and name not in state:
            state[name] = value  # rebuilt on restore, not stored: keep the caller's
    plan.namespace(sched.__dict__, state)
    return True


def assign_generator(g: torch.Generator, s: torch.Generator, plan: Planner) -> bool:
    if g.device.type != s.device.type:
        raise NotReplayable(f"a {g.device} generator cannot take the state of a {s.device} one")
    state = s.get_state()
    if not torch.equal(g.get_state(), state):
        plan.op(lambda: g.set_state(state.clone()))
    return True
