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

from memostore.effects.rng import GlobalRNG, SeedingFunction
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


# torch seeds its generators from the operating system's entropy with a 64-bit draw
# (53 bits for CUDA's), at start-up and in torch.seed(); a seed a program chooses is,
# in practice, below 2**32 (numpy's and Lightning's range, and the usual 0, 42, 1234).
_CHOSEN_SEEDS = 1 << 32


class TorchRNG(GlobalRNG):
    """torch's default CPU generator (``torch.manual_seed``, ``torch.randn``, dropout)."""

    name = "torch"
    module = "torch"

    def seeding_functions(self) -> list[SeedingFunction]:
        both = ("torch", "cuda")  # torch.manual_seed and torch.seed seed every device too
        out = []
        for module in (torch, torch.random):
            out += [
                SeedingFunction(module, "manual_seed", both),
                SeedingFunction(module, "seed", both, "seed"),
                SeedingFunction(module, "set_rng_state", (self.name,)),
            ]
        out.append(SeedingFunction(torch.random, "fork_rng", both, "fork"))
        return out

    def seed_marker(self) -> int:
        return torch.initial_seed()

    def seeded_by_program(self, state: bytes) -> bool:
        return torch.initial_seed() < _CHOSEN_SEEDS

    def get_state(self) -> bytes:
        return bytes(raw_numpy(torch.get_rng_state()))

    def set_state(self, state: bytes) -> None:
        torch.set_rng_state(raw_frombuffer(bytearray(state), dtype=torch.uint8).clone())


class CudaRNG(GlobalRNG):
    """The default generator of every CUDA device, once CUDA is initialised.

    State bytes: the device count, then each device's state with its length.
    Before CUDA is initialised nothing can have drawn from these generators,
    and reading them would initialise CUDA: they are not in use then (their
    seeding functions are watched from torch's import on, as seeding is queued
    until then). The devices count as one RNG: seeded once any device is.
    """

    name = "cuda"
    module = "torch"

    def in_use(self) -> bool:
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def seeding_functions(self) -> list[SeedingFunction]:
        import torch.cuda.random

        names = (self.name,)
        kinds = {"seed": "seed", "seed_all": "seed"}
        return [
            SeedingFunction(module, attr, names, kinds.get(attr, "value"))
            for module in (torch.cuda, torch.cuda.random)
            for attr in (
                "manual_seed",
                "manual_seed_all",
                "seed",
                "seed_all",
                "set_rng_state",
                "set_rng_state_all",
            )
        ]

    def seed_marker(self) -> tuple[int, ...]:
        return tuple(g.initial_seed() for g in torch.cuda.default_generators)

    def seeded_by_program(self, state: bytes) -> bool:
        return any(seed < _CHOSEN_SEEDS for seed in self.seed_marker())

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
