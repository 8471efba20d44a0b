"""Global random number generators: what a body consumed, and leaving them as it did.

Code written the usual way draws from global RNGs: ``random.shuffle``,
``np.random.rand``, ``torch.randn``, dropout, a ``DataLoader`` that shuffles.
A memoised body that draws from one has a result that depends on the RNG's
state at the call, and leaves the RNG advanced. So, for each global RNG that
is in use (its library imported) when a call starts, a miss records:

* whether the body consumed it (its state after the body differs from before);
* the state it consumed from (a digest: part of what the result depends on);
* the state it left (stored, to be set again by a hit).

A hit of an evaluation that consumed an RNG happens only when that RNG is in
the recorded state at the call (seeded code hits in every process; unseeded
randomness misses, as running it would give another result), and sets it to
the state the miss left. An RNG the body did not touch is left alone.

A body that seeds an RNG before drawing from it (``torch.manual_seed(0)`` as
its first line) does not depend on the state it started from: the seeding
functions (``random.seed``, ``np.random.seed``, ``torch.manual_seed`` and the
``set_state`` functions) are watched, and an RNG seeded with a given value
while still in its starting state is recorded without a starting state, so the
call hits whatever state the RNG was in. Seeding from entropy (``seed()``
without a value) is a draw like any other.

The core knows Python's ``random`` and numpy's legacy global RNG; codec
packages add theirs (``torch_codecs`` adds torch's CPU and CUDA generators)
with :func:`register_rng`.
"""

from __future__ import annotations

import array
import functools
import json
import struct
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ..odb.objects import canonical_json, digest_bytes

RNG_PREFIX = b"memostore:rng:1\n"


class GlobalRNG(ABC):
    """One process-wide random number generator.

    Attributes:
        name: stable name in evaluation records (``"python"``, ``"numpy"``, ``"torch"``).
        module: the module whose import puts the RNG in use (None: always).
    """

    name: str = ""
    module: str | None = None

    def watch_resets(self) -> None:  # noqa: B027 - optional: an RNG may have no seeding API
        """Wrap the functions that seed or set this RNG to call :func:`note_reset` first.

        Called once the RNG is in use; must be idempotent.
        """

    def in_use(self) -> bool:
        """Whether the RNG can have been drawn from (its library is imported)."""
        return self.module is None or self.module in sys.modules

    @abstractmethod
    def get_state(self) -> bytes:
        """The RNG's whole state, as canonical bytes (equal states, equal bytes)."""

    @abstractmethod
    def set_state(self, state: bytes) -> None:
        """Put the RNG in *state* (bytes from :meth:`get_state`, maybe another process's)."""


class PythonRNG(GlobalRNG):
    """The generator behind the ``random`` module's functions."""

    name = "python"

    def watch_resets(self) -> None:
        import random

        wrap_resets(random, ("seed", "setstate"), (self.name,))

    # version, whether gauss_next is set, gauss_next, then the Mersenne Twister words.
    _HEAD = struct.Struct("<i?d")

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

    def watch_resets(self) -> None:
        import numpy as np

        wrap_resets(np.random, ("seed", "set_state"), (self.name,))

    # The usual bit generator, packed: its position, gauss cache, then its key words.
    _MT = b"MT19937\n"
    _HEAD = struct.Struct("<qqd")

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
_watched: set[str] = set()


class Frame:
    """One memoised body in progress: the RNG states it started from, and its resets.

    Attributes:
        before: RNG name -> state at the call.
        seeded: RNGs seeded with a given value before the body drew from them.
        settled: RNGs whose first event in the body is known (a draw or a seed).
    """

    __slots__ = ("before", "seeded", "settled")

    def __init__(self, before: dict[str, bytes]) -> None:
        self.before = before
        self.seeded: set[str] = set()
        self.settled: set[str] = set()


_local = threading.local()


def _frames() -> list[Frame]:
    frames = getattr(_local, "frames", None)
    if frames is None:
        frames = _local.frames = []
    return frames


def note_reset(names: Iterable[str], seeded: bool) -> None:
    """An RNG of *names* is about to be seeded (*seeded*: with a given value) or set.

    For every body in progress on this thread that has not met this RNG yet: if
    the RNG is still in the state the body started from, nothing was drawn
    before, and a given seed makes the start state irrelevant; otherwise the
    body drew from it first and depends on where it started.
    """
    frames = _frames()
    if not frames:
        return
    for name in names:
        rng = _registry.get(name)
        if rng is None:
            continue
        now: bytes | None = None
        for frame in frames:
            if name in frame.settled or name not in frame.before:
                continue
            frame.settled.add(name)
            if not seeded:
                continue
            if now is None:
                try:
                    now = rng.get_state()
                except Exception:
                    now = b""
            if now == frame.before[name]:
                frame.seeded.add(name)


def wrap_resets(module: Any, functions: Iterable[str], names: tuple[str, ...]) -> None:
    """Wrap *module*'s seeding functions to call :func:`note_reset` first (once each)."""
    for attr in functions:
        original = getattr(module, attr, None)
        if original is None or getattr(original, "_memostore_reset", False):
            continue
        setattr(module, attr, _reset_wrapper(original, names, attr))


def _reset_wrapper(original: Any, names: tuple[str, ...], attr: str) -> Any:
    entropy = attr in ("seed", "seed_all")  # seed() / seed(None) draws a seed from the OS

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value = args[0] if args else kwargs.get("seed", kwargs.get("a"))
        note_reset(names, seeded=not (entropy and value is None))
        return original(*args, **kwargs)

    wrapper._memostore_reset = True  # type: ignore[attr-defined]
    return wrapper


def register_rng(rng: GlobalRNG) -> None:
    """Track *rng* in every memoised call from now on (a later one of the same name wins)."""
    with _lock:
        _registry[rng.name] = rng


register_rng(PythonRNG())
register_rng(NumpyRNG())


def _load_codec_packages() -> None:
    # torch's generators are registered by torch_codecs, which the codec registry
    # loads lazily: load it now if torch is in use, so its RNG is never missed.
    if "torch" in sys.modules:
        from ..values.codecs import registry

        registry.load_entry_points()


def capture() -> dict[str, bytes]:
    """The state of every global RNG in use now."""
    _load_codec_packages()
    out: dict[str, bytes] = {}
    for name, rng in list(_registry.items()):
        if rng.in_use():
            if name not in _watched:
                _watched.add(name)
                rng.watch_resets()
            try:
                out[name] = rng.get_state()
            except Exception:
                continue  # an RNG whose state cannot be read is not tracked
    return out


def begin() -> Frame:
    """Start watching a body: the RNG states now, and the resets it will make."""
    frame = Frame(capture())
    _frames().append(frame)
    return frame


def end(frame: Frame) -> dict[str, tuple[str | None, bytes]]:
    """Stop watching *frame*'s body: what it drew, see :func:`consumed`."""
    frames = _frames()
    if frame in frames:
        frames.remove(frame)
    return consumed(frame.before, capture(), frame.seeded)


def state_digest(name: str, state: bytes) -> str:
    return digest_bytes(RNG_PREFIX + name.encode() + b"\n" + state)


def consumed(
    before: dict[str, bytes],
    after: dict[str, bytes],
    seeded: set[str] | frozenset[str] = frozenset(),
) -> dict[str, tuple[str | None, bytes]]:
    """RNG name -> (digest of the state drawn from, state left) for each RNG that moved.

    The digest is None for an RNG the body seeded before drawing from it.
    """
    return {
        name: (None if name in seeded else state_digest(name, state), after[name])
        for name, state in before.items()
        if name in after and after[name] != state
    }


def current_digests(names: Iterable[str]) -> dict[str, str] | None:
    """The digest of each named RNG's state now; None if one of them is not in use."""
    _load_codec_packages()
    out: dict[str, str] = {}
    for name in names:
        rng = _registry.get(name)
        if rng is None or not rng.in_use():
            return None
        try:
            out[name] = state_digest(name, rng.get_state())
        except Exception:
            return None
    return out


def condition_key(digests: dict[str, str]) -> str:
    """One digest of the RNG states a call starts from (for the RNG-specific ref)."""
    return digest_bytes(RNG_PREFIX + canonical_json(digests))


def restore(states: dict[str, bytes]) -> None:
    """Set each named RNG to its state (as the miss left it).

    To a body in progress around this call (a hit inside a miss), this is a
    draw, not a seed: the state set depends on the one the hit started from.
    """
    _load_codec_packages()
    note_reset(states, seeded=False)
    for name, state in states.items():
        rng = _registry.get(name)
        if rng is not None:
            rng.set_state(state)
