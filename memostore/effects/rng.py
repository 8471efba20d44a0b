"""Global random number generators: what each one is, its state, and how a program seeds it.

Code written the usual way draws from global RNGs: ``random.shuffle``,
``np.random.rand``, ``torch.randn``, dropout, a ``DataLoader`` that shuffles.
A memoised body that draws from one has a result that depends on the RNG's
state at the call, and leaves the RNG advanced. This module says what a global
RNG is to memostore: a name, a state as canonical bytes, the functions that
seed it, and what its state shows of how it was seeded. ``seeding.py`` tracks
whether the program has seeded each one; ``draws.py`` records what a body drew
and sets the RNGs again on a hit.

The core knows Python's ``random`` and numpy's legacy global RNG; codec
packages add theirs (``torch_codecs`` adds torch's CPU and CUDA generators)
with :func:`register_rng`.
"""

from __future__ import annotations

import array
import json
import struct
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ..odb.objects import canonical_json, digest_bytes
from . import mt19937

RNG_PREFIX = b"memostore:rng:1\n"


@dataclass(frozen=True)
class SeedingFunction:
    """A module function that seeds or sets global RNGs, to be watched.

    Attributes:
        module: the module object holding it.
        attr: its name there.
        names: the RNGs it seeds (``torch.manual_seed`` seeds ``torch`` and ``cuda``).
        kind: ``"value"`` (always sets a chosen state: ``manual_seed(n)``,
            ``set_state(s)``), ``"seed"`` (a value when one is given, else the
            operating system's entropy: ``random.seed()``, ``torch.seed()``), or
            ``"fork"`` (``torch.random.fork_rng``: states put back on exit).
    """

    module: Any
    attr: str
    names: tuple[str, ...]
    kind: str = "value"

    @property
    def label(self) -> str:
        return f"{getattr(self.module, '__name__', '?')}.{self.attr}"


class GlobalRNG(ABC):
    """One process-wide random number generator.

    Attributes:
        name: stable name in evaluation records (``"python"``, ``"numpy"``, ``"torch"``).
        module: the module whose import puts the RNG in use (None: always).
    """

    name: str = ""
    module: str | None = None

    def seeding_functions(self) -> list[SeedingFunction]:
        """The functions that seed or set this RNG (imports its module; called once it is)."""
        return []

    def importable(self) -> bool:
        """Whether the RNG's library is imported (its seeding functions can be called)."""
        return self.module is None or self.module in sys.modules

    def in_use(self) -> bool:
        """Whether the RNG can have been drawn from (its library is imported)."""
        return self.importable()

    def seed_marker(self) -> Hashable | None:
        """A cheap value that changes whenever the RNG is seeded (None: the RNG keeps none)."""
        return None

    def seeded_by_program(self, state: bytes) -> bool | None:
        """What *state* shows of the RNG's last seeding.

        True: seeded with a value the program chose; False: seeded from the
        operating system's entropy; None: the state cannot tell.
        """
        return None

    @abstractmethod
    def get_state(self) -> bytes:
        """The RNG's whole state, as canonical bytes (equal states, equal bytes)."""

    @abstractmethod
    def set_state(self, state: bytes) -> None:
        """Put the RNG in *state* (bytes from :meth:`get_state`, maybe another process's)."""


class PythonRNG(GlobalRNG):
    """The generator behind the ``random`` module's functions."""

    name = "python"
    module = "random"  # imported by any program that draws from it (memostore's calls do)

    def seeding_functions(self) -> list[SeedingFunction]:
        import random

        names = (self.name,)
        return [
            SeedingFunction(random, "seed", names, "seed"),
            SeedingFunction(random, "setstate", names),
        ]

    # version, whether gauss_next is set, gauss_next, then the Mersenne Twister words.
    _HEAD = struct.Struct("<i?d")

    def seeded_by_program(self, state: bytes) -> bool | None:
        words = array.array("Q")
        words.frombytes(state[self._HEAD.size :])
        if len(words) != mt19937.N + 1:
            return None
        return mt19937.seeded_with_value(words[: mt19937.N], words[mt19937.N])

    def get_state(self) -> bytes:
        import random

        version, internal, gauss = random.getstate()
        head = self._HEAD.pack(version, gauss is not None, gauss or 0.0)
        return head + array.array("Q", internal).tobytes()

    def set_state(self, state: bytes) -> None:
        import random

        version, has_gauss, gauss = self._HEAD.unpack_from(state)
        internal = array.array("Q")
        internal.frombytes(state[self._HEAD.size :])
        random.setstate((version, tuple(internal), gauss if has_gauss else None))


class NumpyRNG(GlobalRNG):
    """numpy's legacy global ``RandomState`` (``np.random.rand``, ``np.random.seed``)."""

    name = "numpy"
    module = "numpy"

    def seeding_functions(self) -> list[SeedingFunction]:
        import numpy.random
        import numpy.random.mtrand

        names = (self.name,)
        return [
            SeedingFunction(module, attr, names, "seed" if attr == "seed" else "value")
            for module in (numpy.random, numpy.random.mtrand)
            for attr in ("seed", "set_state")
        ]

    # The usual bit generator, packed: its position, gauss cache, then its key words.
    _MT = b"MT19937\n"
    _HEAD = struct.Struct("<qqd")

    def seeded_by_program(self, state: bytes) -> bool | None:
        if not state.startswith(self._MT):
            return None
        pos = self._HEAD.unpack_from(state, len(self._MT))[0]
        words = array.array("I")
        if words.itemsize != 4:  # pragma: no cover - every supported platform has 4-byte I
            return None
        words.frombytes(state[len(self._MT) + self._HEAD.size :])
        if sys.byteorder != "little":  # pragma: no cover
            words.byteswap()
        return mt19937.seeded_with_value(words, pos)

    def get_state(self) -> bytes:
        import numpy as np

        state = np.random.get_state(legacy=False)
        if state.get("bit_generator") == "MT19937":
            inner = state["state"]
            head = self._HEAD.pack(int(inner["pos"]), int(state["has_gauss"]), state["gauss"])
            return self._MT + head + inner["key"].astype("<u4").tobytes()
        return canonical_json(_plain(state))

    def set_state(self, state: bytes) -> None:
        import numpy as np

        if state.startswith(self._MT):
            pos, has_gauss, gauss = self._HEAD.unpack_from(state, len(self._MT))
            key = np.frombuffer(state[len(self._MT) + self._HEAD.size :], dtype="<u4")
            np.random.set_state(
                {
                    "bit_generator": "MT19937",
                    "state": {"key": key.astype(np.uint32), "pos": pos},
                    "has_gauss": has_gauss,
                    "gauss": gauss,
                }
            )
            return
        np.random.set_state(_arrays(json.loads(state)))


def _plain(value: Any) -> Any:
    """A JSON-able copy of a numpy RNG state dict (arrays as dtype and hex bytes)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "dtype") and hasattr(value, "tobytes"):
        return {"$nd": str(value.dtype), "hex": value.tobytes().hex()}
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return value


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        if "$nd" in value:
            import numpy as np

            return np.frombuffer(bytes.fromhex(value["hex"]), dtype=value["$nd"]).copy()
        return {k: _arrays(v) for k, v in value.items()}
    return value


_registry: dict[str, GlobalRNG] = {}
_lock = threading.Lock()


def register_rng(rng: GlobalRNG) -> None:
    """Track *rng* in every memoised call from now on (a later one of the same name wins)."""
    with _lock:
        _registry[rng.name] = rng


def registered(load_codecs: bool = True) -> list[GlobalRNG]:
    """Every registered RNG; *load_codecs*: codec packages' too, once their library is imported."""
    if load_codecs:
        load_codec_packages()
    return list(_registry.values())


def get(name: str) -> GlobalRNG | None:
    return _registry.get(name)


register_rng(PythonRNG())
register_rng(NumpyRNG())


def load_codec_packages() -> None:
    """Load the codec packages if torch is in use, so that torch's RNGs are never missed.

    torch's generators are registered by ``torch_codecs``, which the codec
    registry loads lazily.
    """
    if "torch" in sys.modules:
        from ..values.codecs import registry

        registry.load_entry_points()


def state_digest(name: str, state: bytes) -> str:
    return digest_bytes(RNG_PREFIX + name.encode() + b"\n" + state)


def condition_key(digests: dict[str, str]) -> str:
    """One digest of the RNG states a call starts from (for the RNG-specific ref)."""
    return digest_bytes(RNG_PREFIX + canonical_json(digests))


def read_states(names: Iterable[str] | None = None) -> dict[str, bytes]:
    """The state of each named RNG (default: every one) that is in use and readable."""
    out: dict[str, bytes] = {}
    rngs = registered() if names is None else [_registry.get(n) for n in names]
    for rng in rngs:
        if rng is None or not rng.in_use():
            continue
        try:
            out[rng.name] = rng.get_state()
        except Exception:
            continue  # an RNG whose state cannot be read is not tracked
    return out
