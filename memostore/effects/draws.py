"""What a memoised body drew from the global RNGs, and leaving them as it did.

For each global RNG in use when a call starts (``rng.py``), a miss records:

* whether the body consumed it (its state after the body differs from before);
* the state it consumed from (a digest: what a seeded RNG must be in for a hit);
* the state it left (stored, to be set again by a hit);
* its lineage at the call, and the lineage the body's own seedings left it in
  (``seeding.py``).

A body that seeds an RNG with a value before drawing from it
(``torch.manual_seed(0)`` as its first line) does not depend on the state it
started from: it is recorded without a starting state, so the call hits
whatever state the RNG was in. Seeding from entropy (``seed()`` without a
value) is a draw like any other.

A hit sets each RNG the stored body drew from to the state it left; the RNG
stays in the lineage it was in, unless the stored body seeded it. An RNG the
body did not touch is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import rng as rngs
from . import seeding


@dataclass(frozen=True)
class Draw:
    """What a body did to one global RNG.

    Attributes:
        before: digest of the state it drew from (None: it seeded the RNG first).
        after: the state it left.
        seeded: whether the RNG was seeded when the call started.
        leaves: the lineage the body's own seedings left it in (None: it did not seed it).
    """

    before: str | None
    after: bytes
    seeded: bool
    leaves: bool | None = None


def begin() -> seeding.Frame:
    """Start watching a body: the RNG states and lineages now, and the seedings it will make."""
    before = seeding.read()
    at_start = {name: seeding.lineage(name).seeded for name in before}
    frame = seeding.Frame(before, at_start)
    seeding.frames().append(frame)
    return frame


def end(frame: seeding.Frame) -> dict[str, Draw]:
    """Stop watching *frame*'s body: what it drew, see :func:`consumed`."""
    after = seeding.read()  # first: a seeding noticed now is the body's own
    stack = seeding.frames()
    if frame in stack:
        stack.remove(frame)
    return consumed(frame, after)


def consumed(frame: seeding.Frame, after: dict[str, bytes]) -> dict[str, Draw]:
    """RNG name -> :class:`Draw` for each RNG whose state the body moved."""
    return {
        name: Draw(
            None if name in frame.seeded else rngs.state_digest(name, state),
            after[name],
            frame.seeded_at_start.get(name, False),
            frame.leaves.get(name),
        )
        for name, state in frame.before.items()
        if name in after and after[name] != state
    }


def record(draws: Mapping[str, Draw], add_bytes: Callable[[bytes], str]) -> dict[str, Any]:
    """The evaluation's ``rng`` field (``docs/format.md``); *add_bytes* stores each state left."""
    out: dict[str, Any] = {}
    for name, draw in draws.items():
        entry: dict[str, Any] = {"after": add_bytes(draw.after), "seeded": draw.seeded}
        if draw.before:
            entry["before"] = draw.before
        if draw.leaves is not None:
            entry["leaves"] = "seeded" if draw.leaves else "unseeded"
        out[name] = entry
    return out


def conditions(record: Mapping[str, Any] | None) -> dict[str, str]:
    """RNG name -> digest of the state the body drew from (RNGs it seeded first: none)."""
    out: dict[str, str] = {}
    for name, entry in (record or {}).items():
        if isinstance(entry, Mapping) and isinstance(entry.get("before"), str):
            out[name] = entry["before"]
    return out


def seeded_at_call(record: Mapping[str, Any] | None) -> dict[str, bool | None]:
    """RNG name -> whether it was seeded when the stored call started (None: not recorded)."""
    out: dict[str, bool | None] = {}
    for name, entry in (record or {}).items():
        if isinstance(entry, Mapping):
            seeded = entry.get("seeded")
            out[name] = seeded if isinstance(seeded, bool) else None
    return out


def restore(states: Mapping[str, bytes], record: Mapping[str, Any] | None = None) -> None:
    """Set each named RNG to its state (as the miss left it); lineages as the body left them.

    To a body in progress around this call (a hit inside a miss), this is a
    draw, not a seed: the state set depends on the one the hit started from.
    """
    rngs.load_codec_packages()
    seeding.note_draw(states)
    with seeding.memostore_sets_states():
        for name, state in states.items():
            rng = rngs.get(name)
            if rng is not None:
                rng.set_state(state)
    for name, state in states.items():
        entry = (record or {}).get(name)
        leaves = entry.get("leaves") if isinstance(entry, Mapping) else None
        seeding.set_after_hit(name, state, None if leaves is None else leaves == "seeded")
