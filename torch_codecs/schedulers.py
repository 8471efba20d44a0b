"""Learning-rate schedulers, bound to the restored optimizer.

Node (tag ``torch.lr_scheduler``, inline in the document that holds it)::

    cls     digest-pinned code ref of the scheduler class
    state   the scheduler's __dict__: the optimizer, epoch counters, last lrs,
            lr lambdas (functions and lambdas as code refs), sub-schedulers
            (``SequentialLR``, ``ChainedScheduler``), ...

A scheduler is not a document of its own: stored beside its optimizer in one
result (``return model, opt, sched``), its ``optimizer`` is the same object as
the result's optimizer, and restores as that object (``sched.optimizer is
opt``). Restoring wraps ``opt.step`` again the way the scheduler's constructor
does, so the "step order" checks of torch keep working. Weak references in a
scheduler (``CyclicLR``'s cached scale method) are rebuilt, not stored.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from memostore.values.codecs import Codec

from .replay import assign_scheduler
from .summaries import summarize

_WEAK_TYPES = (weakref.ref, weakref.WeakMethod)


class SchedulerCodec(Codec):
    """Every ``torch.optim.lr_scheduler`` scheduler, ``ReduceLROnPlateau`` included."""

    tag = "torch.lr_scheduler"
    types = (LRScheduler,)
    type_names = ("torch.optim.lr_scheduler.ReduceLROnPlateau",)

    def encode(self, sched: Any, enc: Any) -> dict[str, Any]:
        state = {k: v for k, v in sched.__dict__.items() if not isinstance(v, _WEAK_TYPES)}
        return {"cls": enc.code(type(sched)), "state": enc.node(state)}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        cls = dec.code(node["cls"])
        sched = cls.__new__(cls)
        sched.__dict__.update(dec.node(node["state"]))
        # From the class, never the instance: its dict is the stored state, and a
        # callable planted there under this name would be called by decoding.
        rebuild = getattr(cls, "_init_scale_fn", None)
        if callable(rebuild):
            rebuild(sched)
        optimizer = sched.__dict__.get("optimizer")
        if isinstance(optimizer, torch.optim.Optimizer):
            track_step_calls(optimizer)
        return sched

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}

    def assign(self, target: Any, source: Any, plan: Any) -> bool:
        return assign_scheduler(target, source, plan, _WEAK_TYPES)


def track_step_calls(opt: torch.optim.Optimizer) -> None:
    """Wrap ``opt.step`` to record that it ran, as a scheduler's constructor does.

    ``LRScheduler.step`` reads the mark to warn when it is called before
    ``optimizer.step()``; without the wrapper it would warn that the optimizer's
    step was overridden.
    """
    if hasattr(opt.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = weakref.ref(opt)
    func = type(opt).step

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        target = opt_ref()
        target._opt_called = True  # type: ignore[union-attr]
        return func.__get__(target, type(target))(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    opt.step = wrapper  # type: ignore[method-assign]
