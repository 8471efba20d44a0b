"""An optimizer's parameters in the order its state dict numbers them.

Shared by the optimizer codec (which stores state by that order) and the
replay of an optimizer in place (which pairs the caller's parameters with the
restored ones by it).
"""

from __future__ import annotations

from typing import Any

import torch


def params_in(groups: list[dict[str, Any]]) -> list[Any]:
    """The parameters of an optimizer's *groups* in ``state_dict`` order (each once)."""
    seen: set[int] = set()
    out = []
    for group in groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def ordered_params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in ``state_dict`` order (each once)."""
    return params_in(opt.param_groups)
