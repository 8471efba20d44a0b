"""Seeded or unseeded: each global RNG's lineage, and the seeding events a body makes.

An RNG is *unseeded* from the start of the process, when the library seeds it
from the operating system's entropy, until the program seeds it with a value
(``torch.manual_seed(0)``, ``random.seed(0)``, ``np.random.seed(0)``, a
``set_state``, Lightning's ``seed_everything``, transformers' ``set_seed``);
it is *seeded* from then on, and unseeded again after a seeding from entropy
(``torch.seed()``, ``random.seed()``). A run drawn from an unseeded RNG has no
reproducible result, so any stored run of the same call is as valid an outcome
(``call/rng_conditions.py``); a seeded RNG must be in the recorded state.

How memostore knows, without slowing a hit:

* from the moment it meets a library (a ``@memo`` decoration, or a memoised
  call once the library is imported), its seeding functions are wrapped: a
  call sets the lineage, and tells every body in progress that it seeded;
* what happened before is read from the RNG's state (:meth:`GlobalRNG.seeded_by_program`):
  torch's generators record their seed (an entropy seed is a 64-bit draw, one
  the program chose is taken to be one below 2**32); a Mersenne Twister
  (``random``, numpy) that nothing has drawn from since its last seeding shows
  whether that seed was a value or entropy. An RNG already drawn from when
  memostore meets it, whose state cannot tell, counts as seeded: a hit then
  needs the recorded state, as a miss would give another result;
* a seeding the wrappers cannot see (a generator's own ``manual_seed``, a
  function imported by name before memostore met its library) is noticed when
  the RNG's seed marker changed (torch), or from a Mersenne Twister's state
  when nothing was drawn since;
* memostore's own state changes (a hit setting what the miss left) are not
  seedings: the lineage stays (unless the stored body seeded the RNG itself).

Leaving an RNG seeded by a mistaken guess costs a recomputation; leaving it
unseeded would serve another seed's result, so every doubt counts as seeded.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import rng as rngs

# Why an RNG is in its lineage, for verbose lines and `memostore show`.
WHY_NOT_SEEDED = "not seeded"
WHY_BEFORE = "seeded (its state shows a seed the program chose)"
WHY_DRAWN_BEFORE = "drawn from before memostore met it, so counted as seeded"
WHY_UNSEEN = "seeded outside the functions memostore watches"


@dataclass
class Lineage:
    """Whether an RNG is seeded, and how it came to be (for messages)."""

    seeded: bool
    why: str


_lineage: dict[str, Lineage] = {}
_marker: dict[str, Hashable] = {}
_seen: dict[str, bytes] = {}  # the state last read or set by memostore
_watched: set[tuple[int, str]] = set()  # (id of module, attribute) wrapped
_met: set[str] = set()  # RNGs whose seeding functions are wrapped
_lock = threading.RLock()
_local = threading.local()


class Frame:
    """One memoised body in progress: the RNG states it started from, and its seedings.

    Attributes:
        before: RNG name -> state at the call.
        seeded_at_start: RNG name -> whether it was seeded at the call.
        seeded: RNGs seeded with a given value before the body drew from them
            (the body does not depend on where they started).
        settled: RNGs whose first event in the body is known (a draw or a seed).
        leaves: RNG name -> the lineage the body's own seedings left it in.
    """

    __slots__ = ("before", "leaves", "seeded", "seeded_at_start", "settled")

    def __init__(self, before: dict[str, bytes], seeded_at_start: dict[str, bool]) -> None:
        self.before = before
        self.seeded_at_start = seeded_at_start
        self.seeded: set[str] = set()
        self.settled: set[str] = set()
        self.leaves: dict[str, bool] = {}


def frames() -> list[Frame]:
    """The bodies in progress on this thread, outermost first."""
    found = getattr(_local, "frames", None)
    if found is None:
        found = _local.frames = []
    return found


def _depth() -> int:
    return getattr(_local, "depth", 0)


@contextlib.contextmanager
def _inside() -> Iterator[None]:
    """Seeding functions called meanwhile on this thread are not events of their own."""
    _local.depth = _depth() + 1
    try:
        yield
    finally:
        _local.depth -= 1


def memostore_sets_states() -> contextlib.AbstractContextManager[None]:
    """memostore itself sets RNG states meanwhile (a hit): not a seeding by the program."""
    return _inside()


# -- lineage ----------------------------------------------------------------------------------
def lineage(name: str) -> Lineage:
    """The lineage of RNG *name* now (an RNG not in use yet is unseeded)."""
    found = _lineage.get(name)
    return found if found is not None else Lineage(False, WHY_NOT_SEEDED)


def _set(name: str, seeded: bool, why: str) -> None:
    """Set RNG *name*'s lineage; the bodies in progress on this thread leave it so."""
    _lineage[name] = Lineage(seeded, why)
    for frame in frames():
        frame.leaves[name] = seeded
    rng = rngs.get(name)
    _seen.pop(name, None)  # its state changed: read it afresh
    if rng is not None and rng.in_use():
        with contextlib.suppress(Exception):
            _marker[name] = rng.seed_marker()


def set_after_hit(name: str, state: bytes, leaves: bool | None) -> None:
    """memostore set RNG *name* to *state*: keep its lineage, or take the one the body left."""
    if leaves is not None:
        why = "seeded by the stored call's body" if leaves else "seeded from entropy by the body"
        _set(name, leaves, why)
    rng = rngs.get(name)
    _seen[name] = state
    if rng is not None and rng.in_use():
        with contextlib.suppress(Exception):
            _marker[name] = rng.seed_marker()


# -- meeting a library ------------------------------------------------------------------------
def meet(load_codecs: bool = True) -> None:
    """Wrap the seeding functions of every RNG whose library is imported; read new RNGs' lineage.

    Args:
        load_codecs: load the codec packages first (``torch_codecs`` registers
            torch's RNGs), as a memoised call does; a ``@memo`` definition does
            not, to stay cheap: torch's seed marker shows later what happened.
    """
    for rng in rngs.registered(load_codecs):
        name = rng.name
        if name not in _met and rng.importable():
            with _lock:
                if name not in _met:
                    _watch(rng)
                    _met.add(name)
        if name not in _lineage and rng.in_use():
            try:
                state = rng.get_state()
            except Exception:
                continue
            _first_contact(rng, state)


def _first_contact(rng: rngs.GlobalRNG, state: bytes) -> None:
    """Read an RNG's lineage from its state, the first time memostore sees it in use."""
    name = rng.name
    shown = rng.seeded_by_program(state)
    if shown is None:
        _lineage.setdefault(name, Lineage(True, WHY_DRAWN_BEFORE))
    else:
        _lineage.setdefault(name, Lineage(shown, WHY_BEFORE if shown else WHY_NOT_SEEDED))
    with contextlib.suppress(Exception):
        _marker[name] = rng.seed_marker()
    _seen[name] = state


def observe(name: str, state: bytes) -> None:
    """memostore read RNG *name* in *state*: notice a seeding the wrappers did not see."""
    rng = rngs.get(name)
    if rng is None:
        return
    if name not in _lineage:
        _first_contact(rng, state)
        return
    try:
        marker = rng.seed_marker()
    except Exception:
        marker = None
    if marker is not None:
        # The RNG records its seed: any change memostore did not make or see is a seeding.
        known = _marker.get(name)
        if known is not None and known != marker:
            _set(name, True, WHY_UNSEEN)
        _marker[name] = marker
        _seen[name] = state
        return
    if _seen.get(name) == state:
        return
    if not lineage(name).seeded and rng.seeded_by_program(state):
        _set(name, True, WHY_UNSEEN)
    _seen[name] = state


def read(names: Iterable[str] | None = None) -> dict[str, bytes]:
    """The state of each named RNG in use (default: all), its lineage brought up to date."""
    meet()
    states = rngs.read_states(names)
    for name, state in states.items():
        observe(name, state)
    return states


# -- wrappers ---------------------------------------------------------------------------------
def _watch(rng: rngs.GlobalRNG) -> None:
    try:
        functions = rng.seeding_functions()
    except Exception:
        return  # a library that cannot be imported has no seeding to watch
    for fn in functions:
        marker = (id(fn.module), fn.attr)
        original = getattr(fn.module, fn.attr, None)
        if original is None or marker in _watched or getattr(original, "_memostore_seeding", False):
            continue
        wrapper = _fork_wrapper(original, fn) if fn.kind == "fork" else _seed_wrapper(original, fn)
        wrapper._memostore_seeding = True  # type: ignore[attr-defined]
        setattr(fn.module, fn.attr, wrapper)
        _watched.add(marker)


def _given_value(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args:
        return args[0]
    for key in ("seed", "a", "new_state", "state"):
        if key in kwargs:
            return kwargs[key]
    return None


def _seed_wrapper(original: Any, fn: rngs.SeedingFunction) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _depth():
            # Called by another seeding function (torch.manual_seed seeds CUDA through
            # torch.cuda.manual_seed_all) or by memostore: that caller speaks for it.
            return original(*args, **kwargs)
        value = fn.kind == "value" or _given_value(args, kwargs) is not None
        _note_frames(fn.names, value)
        with _inside():
            result = original(*args, **kwargs)
        why = f"seeded by {fn.label}" if value else f"seeded from entropy by {fn.label}()"
        for name in fn.names:
            _set(name, value, why)
        return result

    return wrapper


def _note_frames(names: Iterable[str], value: bool) -> None:
    """An RNG of *names* is about to be seeded (*value*: with a given value) or set.

    For every body in progress on this thread that has not met this RNG yet: if
    the RNG is still in the state the body started from, nothing was drawn
    before, and a given seed makes the start state irrelevant; otherwise the
    body drew from it first and depends on where it started.
    """
    stack = frames()
    if not stack:
        return
    for name in names:
        rng = rngs.get(name)
        if rng is None:
            continue
        now: bytes | None = None
        for frame in stack:
            if name in frame.settled or name not in frame.before:
                continue
            frame.settled.add(name)
            if not value:
                continue
            if now is None:
                try:
                    now = rng.get_state()
                except Exception:
                    now = b""
            if now == frame.before[name]:
                frame.seeded.add(name)


def note_draw(names: Iterable[str]) -> None:
    """The RNGs *names* are set by memostore inside bodies in progress: to them, a draw."""
    _note_frames(names, value=False)


def _fork_wrapper(original: Any, fn: rngs.SeedingFunction) -> Any:
    """``fork_rng``: on exit the states are put back, and so are their lineages.

    Seedings inside the fork (``torch.utils.checkpoint`` sets the state it
    recomputes from) last until its exit only; a body in progress meets the
    RNG after the fork as it was before it.
    """
    signature = inspect.signature(original)

    @functools.wraps(original)
    @contextlib.contextmanager
    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        try:
            bound = signature.bind(*args, **kwargs)
            enabled = bound.arguments.get("enabled", True)
            every_device = (
                bound.arguments.get("devices") is None
                and bound.arguments.get("device_type", "cuda") == "cuda"
            )
        except TypeError:
            enabled, every_device = False, False  # the original raises it as it should
        names = fn.names if every_device else fn.names[:1]
        saved = _snapshot(names)
        try:
            with original(*args, **kwargs) as inner:
                yield inner
        finally:
            if enabled:
                _put_back(saved)

    return wrapper


@dataclass
class _Saved:
    lineage: dict[str, Lineage | None]
    frames: list[tuple[Frame, str, bool, bool, bool | None]] = field(default_factory=list)


def _snapshot(names: Iterable[str]) -> _Saved:
    saved = _Saved({name: _lineage.get(name) for name in names})
    for frame in frames():
        for name in saved.lineage:
            saved.frames.append(
                (
                    frame,
                    name,
                    name in frame.settled,
                    name in frame.seeded,
                    frame.leaves.get(name),
                )
            )
    return saved


def _put_back(saved: _Saved) -> None:
    for name, was in saved.lineage.items():
        if was is None:
            _lineage.pop(name, None)
        else:
            _lineage[name] = was
        _seen.pop(name, None)
        rng = rngs.get(name)
        if rng is not None and rng.in_use():
            with contextlib.suppress(Exception):
                _marker[name] = rng.seed_marker()
    for frame, name, settled, seeded, leaves in saved.frames:
        for members, present in ((frame.settled, settled), (frame.seeded, seeded)):
            if present:
                members.add(name)
            else:
                members.discard(name)
        if leaves is None:
            frame.leaves.pop(name, None)
        else:
            frame.leaves[name] = leaves
