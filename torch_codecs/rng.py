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

from memostore.effects.rng import GlobalRNG, wrap_resets
from memostore.errors import DecodeError
from memostore.values.codecs import Codec

from .exposure import raw_frombuffer, raw_numpy
from .replay import assign_generator
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
        if type(state) is not torch.Tensor:  # no method of a decoded object runs here
            raise DecodeError("a stored generator's state is not a tensor")
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

    def assign(self, target: torch.Generator, source: torch.Generator, plan: Any) -> bool:
        return assign_generator(target, source, plan)


class TorchRNG(GlobalRNG):
    """torch's default CPU generator (``torch.manual_seed``, ``torch.randn``, dropout)."""

    name = "torch"
    module = "torch"

    def watch_resets(self) -> None:
        # torch.manual_seed seeds every device's generator too.
        names = ("torch", "cuda")
        wrap_resets(torch, ("manual_seed", "seed", "set_rng_state"), names)
        wrap_resets(torch.random, ("manual_seed", "seed", "set_rng_state"), names)

    def get_state(self) -> bytes:
        return bytes(raw_numpy(torch.get_rng_state()))

    def set_state(self, state: bytes) -> None:
        torch.set_rng_state(raw_frombuffer(bytearray(state), dtype=torch.uint8).clone())


class CudaRNG(GlobalRNG):
    """The default generator of every CUDA device, once CUDA is initialised.

    State bytes: the device count, then each device's state with its length.
    Before CUDA is initialised nothing can have drawn from these generators,
    and reading them would initialise CUDA: they are not in use then.
    """

    name = "cuda"
    module = "torch"

    def in_use(self) -> bool:
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def watch_resets(self) -> None:
        functions = (
            "manual_seed",
            "manual_seed_all",
            "seed",
            "seed_all",
            "set_rng_state",
            "set_rng_state_all",
        )
        wrap_resets(torch.cuda, functions, (self.name,))

    def get_state(self) -> bytes:
        states = [bytes(raw_numpy(s.cpu())) for s in torch.cuda.get_rng_state_all()]
        out = [len(states).to_bytes(4, "little")]
        for state in states:
            out += [len(state).to_bytes(8, "little"), state]
        return b"".join(out)

    def set_state(self, state: bytes) -> None:
        count = int.from_bytes(state[:4], "little")
        pos, states = 4, []
        for _ in range(count):
            size = int.from_bytes(state[pos : pos + 8], "little")
            chunk = bytearray(state[pos + 8 : pos + 8 + size])
            states.append(raw_frombuffer(chunk, dtype=torch.uint8).clone())
            pos += 8 + size
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)
        else:  # fewer devices here: set those there are
            for index in range(min(len(states), torch.cuda.device_count())):
                torch.cuda.set_rng_state(states[index], index)
