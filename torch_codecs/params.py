"""An optimizer's parameters in the order its state dict numbers them.

Shared by the optimizer codec (which stores state by that order) and the
replay of an optimizer in place (which pairs the caller's parameters with the
restored ones by it).
"""

from __future__ import annotations

import torch


def ordered_params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in ``state_dict`` order (each once)."""
    seen: set[int] = set()
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out
