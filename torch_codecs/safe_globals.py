"""What restoring a torch value may call: registered into memostore's trust registry.

The torch codecs restore modules, optimizers, schedulers, datasets, samplers
and loaders by ``cls.__new__`` and their state, never by running arbitrary
code; the classes they name must still pass memostore's gate. Allowed here:

- classes torch itself defines that subclass ``nn.Module`` (under ``torch.nn``
  but not ``torch.nn.parallel``, whose constructors join process groups, or
  under ``torch.optim``), ``Optimizer`` and the LR schedulers (under
  ``torch.optim``), ``Dataset`` (``torch.utils.data.dataset`` only: datapipes
  read and write files when iterated), ``Sampler`` and ``DataLoader``;
- the functions of ``torch.nn.functional`` and the ``torch._C._nn`` kernels
  (activations a module holds, such as ``TransformerEncoderLayer.activation``);
- by name: tensors and parameters, ``torch.device``, ``torch.Size``,
  ``torch.Generator``, the default collate functions, the scale and
  annealing functions ``CyclicLR`` and ``OneCycleLR`` keep, and the
  ``load_state_dict`` hook ``weight_norm`` leaves on its module.

User subclasses need nothing here: they are the user's code, pinned by digest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.utils.data import DataLoader, Dataset, Sampler

from memostore.trust import add_safe_globals, register_safe_rule, register_sizer
from memostore.trust.sizes import copies, product

SAFE_NAMES = (
    "torch:Tensor",
    "torch:device",
    "torch:Size",
    "torch:Generator",
    "torch.nn.parameter:Parameter",
    "torch.nn.parameter:Buffer",
    "torch.utils.data._utils.collate:default_collate",
    "torch.utils.data._utils.collate:default_convert",
    "torch.optim.lr_scheduler:CyclicLR._triangular_scale_fn",
    "torch.optim.lr_scheduler:CyclicLR._triangular2_scale_fn",
    "torch.optim.lr_scheduler:CyclicLR._exp_range_scale_fn",
    "torch.optim.lr_scheduler:OneCycleLR._annealing_cos",
    "torch.optim.lr_scheduler:OneCycleLR._annealing_linear",
    # The load_state_dict pre hook weight_norm leaves on its module (renames old keys).
    "torch.nn.utils.parametrizations:_weight_norm_compat_hook",
)

# (base class, module prefixes a subclass torch defines must live under)
_CLASS_RULES: tuple[tuple[type, tuple[str, ...]], ...] = (
    (torch.nn.Module, ("torch.nn.", "torch.optim.")),
    (torch.optim.Optimizer, ("torch.optim.",)),
    (LRScheduler, ("torch.optim.",)),
    (ReduceLROnPlateau, ("torch.optim.",)),
    (Dataset, ("torch.utils.data.dataset",)),
    (Sampler, ("torch.utils.data.sampler", "torch.utils.data.distributed")),
    (DataLoader, ("torch.utils.data.dataloader",)),
)
_EXCLUDED = ("torch.nn.parallel",)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p.rstrip(".") or module.startswith(p) for p in prefixes)


def is_safe_torch_class(obj: Any) -> bool:
    """A class torch defines whose values the torch codecs restore by ``__new__`` and state."""
    if not isinstance(obj, type):
        return False
    module = getattr(obj, "__module__", "") or ""
    if _under(module, _EXCLUDED):
        return False
    return any(issubclass(obj, base) and _under(module, where) for base, where in _CLASS_RULES)


def is_safe_torch_function(obj: Any) -> bool:
    """A function of ``torch.nn.functional`` (or its ``torch._C._nn`` kernel): tensor math."""
    if isinstance(obj, type) or not callable(obj):
        return False
    return getattr(obj, "__module__", None) in ("torch.nn.functional", "torch._C._nn")


def call_size(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """What a torch constructor or function may allocate for these arguments, at most.

    Its int arguments may be sizes (``Tensor(n, m)``, ``Linear(n, m)``), its
    floats scale factors (``interpolate``), and its result as large as its
    largest tensor argument times both (``one_hot``, ``pad``): 16 bytes an element.
    """
    values = (*args, *kwargs.values())
    scale = math.prod(v for v in values if type(v) is float and v > 1)
    if not scale < 2**62:
        return 1 << 62
    # Plain tensors only: a subclass's numel() may be code of its own (__torch_function__).
    numel = max([1, *(v.numel() for v in values if type(v) in _PLAIN_TENSORS)])
    return 16 * product(values) * math.ceil(scale) * numel + copies(args, kwargs)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _sized(obj: Any) -> bool:
    return obj is torch.Tensor or is_safe_torch_class(obj) or is_safe_torch_function(obj)


def register() -> None:
    """Add torch's entries to memostore's trust registry (once, from ``register``)."""
    add_safe_globals(SAFE_NAMES)
    register_safe_rule(
        "torch",
        is_safe_torch_class,
        "classes torch defines that subclass nn.Module (torch.nn, torch.optim; not "
        "torch.nn.parallel), Optimizer, LRScheduler, ReduceLROnPlateau, Dataset "
        "(torch.utils.data.dataset), Sampler or DataLoader",
    )
    register_safe_rule(
        "torch", is_safe_torch_function, "functions of torch.nn.functional and torch._C._nn"
    )
    register_sizer("torch", _sized, call_size)
