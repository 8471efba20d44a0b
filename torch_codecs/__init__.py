"""PyTorch values for memostore: tensors, modules, optimizers, schedulers, data and RNGs.

memostore finds this package through the ``memostore.values.codecs`` entry point
(``torch = "torch_codecs:register"``) the first time it meets a type it does not
know, so importing memostore never imports torch. ``docs/torch.md`` describes
what is stored for each type, and the rules for identity, sharing and caching.
"""

from __future__ import annotations

from typing import Any


def set_check_mode(mode: str) -> None:
    """Trust the verified record (``"recorded"``, the default) or hash ``"always"``.

    Imports torch on first use only: the CLI loads this package for summaries,
    which must not pay for torch.
    """
    from .checks import set_check_mode as set_mode

    set_mode(mode)


def register(registry: Any) -> None:
    """Register every torch codec into a memostore codec registry."""
    from .compiled import CompiledModuleCodec
    from .data import DATA_CODECS
    from .dtensor import DTensorCodec
    from .dtypes import DtypeCodec, MemoryFormatCodec
    from .exposure import install
    from .hooks import WrappedHookCodec
    from .loaders import DataLoaderCodec
    from .modules import ModuleCodec
    from .optim import OptimizerCodec
    from .rng import CudaRNG, GeneratorCodec, TorchRNG
    from .schedulers import SchedulerCodec
    from .tensors import TensorCodec

    codecs = [
        TensorCodec(),
        DTensorCodec(),
        ModuleCodec(),
        CompiledModuleCodec(),
        OptimizerCodec(),
        SchedulerCodec(),
        *DATA_CODECS,
        DataLoaderCodec(),
        GeneratorCodec(),
        DtypeCodec(),
        MemoryFormatCodec(),
        WrappedHookCodec(),
    ]
    for codec in codecs:
        registry.register(codec)
    from memostore.effects.rng import register_rng

    from .safe_globals import register as register_safe_globals

    # What restoring torch values may call (memostore.trust): before any is restored.
    register_safe_globals()

    register_rng(TorchRNG())
    register_rng(CudaRNG())
    from memostore.effects.process import register_setting

    from .settings import register_settings

    register_settings(register_setting)
    # Before any digest is cached: writes that move no version counter are seen from now on.
    install()


__all__ = ["register", "set_check_mode"]
