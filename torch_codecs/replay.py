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
* a generator gets the restored state.

Parts the hash cache proves unchanged (a dataset passed through, a frozen
layer) are not copied at all.
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.effects.replay import MISSING, NotReplayable, Planner
from memostore.values.hashcache import digest_cache

from .fingerprints import tensor_data_state
from .hooks import is_hook_dict
from .params import ordered_params

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
    return True


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
    mine, theirs = ordered_params(o), ordered_params(s)
    if len(mine) != len(theirs) or len(o.param_groups) != len(s.param_groups):
        raise NotReplayable(
            "the optimizer's parameters or groups changed in number: it cannot be updated in place"
        )
    for p, q in zip(mine, theirs, strict=True):
        if plan.value(p, q) is not p:
            raise NotReplayable("an optimizer parameter would have to be replaced")
    position = {id(p): i for i, p in enumerate(mine)}
    theirs_position = {id(q): i for i, q in enumerate(theirs)}
    for group, other in zip(o.param_groups, s.param_groups, strict=True):
        if [position.get(id(p)) for p in group["params"]] != [
            theirs_position.get(id(q)) for q in other["params"]
        ]:
            raise NotReplayable("the optimizer's parameter groups were rearranged")
        wanted = {k: v for k, v in other.items() if k != "params"}
        wanted["params"] = group["params"]
        plan.dict_items(group, wanted)
    states: list[Any] = []
    for p, q in zip(mine, theirs, strict=True):
        theirs_state = s.state.get(q)
        states.append(
            None if not theirs_state else plan.value(o.state.get(p, MISSING), theirs_state)
        )

    def apply_state() -> None:
        for p, state in zip(mine, states, strict=True):
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
        new = plan.value(old, value)
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
