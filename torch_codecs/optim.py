"""Optimizers: parameter groups, per-parameter state and hyper-parameters.

Node (tag ``torch.optim``, a standalone document)::

    cls       digest-pinned code ref of the optimizer class
    params    [tensor node, ...]  every parameter, in state_dict order
    groups    param_groups, with "params" as indices into ``params``
    state     [per-parameter state dict or null, ...], aligned with ``params``
    defaults  the optimizer's defaults
    hooks     {hook dict name: [[n, hook], ...]}, renumbered (see hooks.py)
    extra     any other attribute (user subclasses)

Binding to the restored model: when the optimizer is restored together with
the module that owns its parameters (``return model, opt, sched``), each
optimizer parameter is the module's restored ``nn.Parameter`` itself, so
``opt.step()`` trains the restored model. A parameter is matched by its content
(blob id, ``requires_grad``, device) inside a restored module that holds all of
the optimizer's parameters (the one with the fewest others, when several do;
else parameter by parameter, in the first module that holds it). Among
parameters with identical content, the n-th of the optimizer binds to the n-th
of the module (``model.parameters()`` order). Parameters no restored module
holds come back as fresh ``nn.Parameter`` objects.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable
from typing import Any

import torch

from memostore.errors import DecodeError
from memostore.values.codecs import Codec

from .dtensor import is_shard
from .fingerprints import fingerprint_or_none
from .hooks import encode_hooks, is_hook_dict, restore_hooks
from .modules import SESSION_PARAMS, param_key
from .params import ordered_params
from .replay import assign_optimizer
from .summaries import summarize

_OWN_KEYS = frozenset({"defaults", "state", "param_groups"})


def _is_sched_wrapper(name: str, value: Any) -> bool:
    # An LR scheduler replaces opt.step with a closure that records the call; the
    # scheduler's codec puts a new one in place on restore.
    return name == "step" and hasattr(value, "_wrapped_by_lr_sched")


def _split_dict(opt: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    hooks: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in opt.__dict__.items():
        if name in _OWN_KEYS or _is_sched_wrapper(name, value):
            continue
        if is_hook_dict(name, value):
            hooks[name] = value
        else:
            extra[name] = value
    return hooks, extra


class OptimizerCodec(Codec):
    """Any ``torch.optim.Optimizer``, user subclasses included."""

    tag = "torch.optim"
    types = (torch.optim.Optimizer,)
    standalone = True

    def encode(self, opt: torch.optim.Optimizer, enc: Any) -> dict[str, Any]:
        params = ordered_params(opt)
        index = {id(p): i for i, p in enumerate(params)}
        node: dict[str, Any] = {"cls": enc.code(type(opt))}
        node["params"] = [enc.node(p) for p in params]
        groups = []
        for group in opt.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = [index[id(p)] for p in group["params"]]
            groups.append(g)
        node["groups"] = enc.node(groups)
        node["state"] = enc.node([_state_of(opt, p) for p in params])
        node["defaults"] = enc.node(opt.defaults)
        hooks, extra = _split_dict(opt)
        node["hooks"] = encode_hooks(hooks, enc)
        node["extra"] = enc.node(extra)
        return node

    def decode(self, node: dict[str, Any], dec: Any) -> torch.optim.Optimizer:
        cls = dec.code(node["cls"])
        opt = cls.__new__(cls)
        keys = [param_key(p) if "&" not in p else None for p in node["params"]]
        bound = _match(dec, keys, {}, require_all=True)
        params: list[Any] = []
        fresh: list[int] = []
        for i, pnode in enumerate(node["params"]):
            if bound[i] is None:
                params.append(dec.node(pnode))
                fresh.append(i)
            else:
                params.append(bound[i])
        groups = dec.node(node["groups"])
        # Plain lists and dicts only: no method of a decoded object runs here.
        if type(groups) is not list or any(type(g) is not dict for g in groups):
            raise DecodeError("the stored parameter groups are not a list of dicts")
        for group in groups:
            group["params"] = [params[i] for i in group["params"]]
        states = dec.node(node["state"])
        state: defaultdict[Any, Any] = defaultdict(dict)
        for p, s in zip(params, states, strict=True):
            if s is not None:
                state[p] = s
        defaults = dec.node(node["defaults"])
        extra = dec.node(node["extra"])
        if type(defaults) is not dict or type(extra) is not dict:
            raise DecodeError("the stored defaults of an optimizer are not a dict")
        full = dict(extra)
        hooks = dec.node(node["hooks"])
        if type(hooks) is not dict:
            raise DecodeError("the stored hooks of an optimizer are not a dict")
        full.update(restore_hooks(hooks))
        full.update(defaults=defaults, state=state, param_groups=groups)
        stored = [set(defaults), *(set(g) for g in groups)]
        opt.__setstate__(full)
        # torch's __setstate__ fills in keys it may lack ("differentiable", ...): the
        # value is what was stored, or the caller's optimizer would get them on a hit
        # and the next chained call would miss.
        for names, held in zip(stored, [opt.defaults, *opt.param_groups], strict=True):
            for name in [k for k in held if k not in names]:
                del held[name]
        if fresh:
            used = {i: params[i] for i in range(len(params)) if i not in fresh}
            dec.after(lambda: _bind_late(dec, opt, params, keys, fresh, used))
        return opt

    def holds_shards(self, opt: torch.optim.Optimizer) -> bool:
        return any(map(is_shard, ordered_params(opt)))

    def fingerprint(self, opt: torch.optim.Optimizer) -> Hashable | None:
        params = ordered_params(opt)
        hooks, extra = _split_dict(opt)
        return fingerprint_or_none(
            type(opt),
            params,
            opt.param_groups,
            [opt.state.get(p) for p in params],
            opt.defaults,
            hooks,
            extra,
        )

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}

    def assign(
        self, target: torch.optim.Optimizer, source: torch.optim.Optimizer, plan: Any
    ) -> bool:
        return assign_optimizer(target, source, plan, _split_dict)


def _state_of(opt: torch.optim.Optimizer, p: torch.Tensor) -> Any:
    s = opt.state.get(p)
    return dict(s) if s else None


def _match(
    dec: Any, keys: list[Hashable | None], taken: dict[int, Any], *, require_all: bool
) -> list[Any]:
    """Restored module parameters for *keys* (None where there is none).

    *taken* maps positions already bound to their parameters; those are skipped.
    With *require_all*, bind only if one restored module holds every key.
    """
    registry: list[dict[Hashable, list[Any]]] = dec.session.get(SESSION_PARAMS, [])
    out: list[Any] = [None] * len(keys)
    wanted = Counter(k for i, k in enumerate(keys) if k is not None and i not in taken)
    if not wanted or not registry:
        return out
    used_ids = {id(p) for p in taken.values()}
    holding_all = [
        module for module in registry if all(len(module.get(k, ())) >= n for k, n in wanted.items())
    ]
    if holding_all:
        # The tightest fit: a model and its own optimizer over all of its
        # parameters, rather than a bigger model that happens to hold equal ones.
        best = min(holding_all, key=lambda module: sum(map(len, module.values())))
        return _assign(keys, taken, [best], used_ids)
    if require_all:
        return out
    return _assign(keys, taken, registry, used_ids)


def _assign(
    keys: list[Hashable | None], taken: dict[int, Any], modules: list[Any], used_ids: set[int]
) -> list[Any]:
    out: list[Any] = [None] * len(keys)
    for i, key in enumerate(keys):
        if key is None or i in taken:
            continue
        for module in modules:
            candidate = next((p for p in module.get(key, ()) if id(p) not in used_ids), None)
            if candidate is not None:
                used_ids.add(id(candidate))
                out[i] = candidate
                break
    return out


def _bind_late(
    dec: Any,
    opt: torch.optim.Optimizer,
    params: list[Any],
    keys: list[Hashable | None],
    fresh: list[int],
    used: dict[int, Any],
) -> None:
    """After the whole value is restored, swap fresh parameters for the module's own."""
    bound = _match(dec, keys, used, require_all=False)
    swaps = {id(params[i]): bound[i] for i in fresh if bound[i] is not None}
    if not swaps:
        return
    for group in opt.param_groups:
        group["params"] = [swaps.get(id(p), p) for p in group["params"]]
    state: defaultdict[Any, Any] = defaultdict(dict)
    for p, s in opt.state.items():
        state[swaps.get(id(p), p)] = s
    opt.state = state
