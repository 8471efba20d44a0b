"""``torch.Generator`` as a value: its device and its full state.

Node (tag ``torch.generator``)::

    device   "cpu", "cuda:0", ...
    state    the generator's state (a uint8 tensor node)

Two generators in the same state are equal values (same digest), whatever
their history, so a loader given ``torch.Generator().manual_seed(0)`` keys the
same in every process. A generator of a device this machine lacks restores as
a CPU generator seeded with the stored generator's initial seed, with a
warning (the states of different devices are not interchangeable).

The global RNG states need no codec: ``torch.get_rng_state()`` is a tensor,
``numpy.random.get_state()`` a tuple holding an array, ``random.getstate()`` a
tuple of ints, and numpy's ``Generator`` objects pickle their state.
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.codecs import Codec

from .summaries import summarize
from .tensors import target_device


class GeneratorCodec(Codec):
    """``torch.Generator`` objects."""

    tag = "torch.generator"
    types = (torch.Generator,)

    def encode(self, gen: torch.Generator, enc: Any) -> dict[str, Any]:
        return {
            "device": str(gen.device),
            "seed": gen.initial_seed(),
            "state": enc.node(gen.get_state()),
        }

    def decode(self, node: dict[str, Any], dec: Any) -> torch.Generator:
        state = dec.node(node["state"])
        device = target_device(node["device"], dec)
        gen = torch.Generator(device=device)
        if device.type == torch.device(node["device"]).type:
            # A tensor of its own: set_state reads the storage from its start
            # (it crashes on a view at an offset, as torch 2.13 does).
            gen.set_state(state.clone())
        else:
            gen.manual_seed(node["seed"])
        return gen

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}
