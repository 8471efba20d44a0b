"""One line per memoised call, when asked for: hit or miss, and why it missed.

Off by default. ``MEMOSTORE_VERBOSE=1`` in the environment turns it on for a
process, :func:`set_verbose` from code (it wins over the environment). Lines
go to standard error, as joblib's ``verbose`` does. Each id says its kind: a
``key`` is the call key (``f.key(...)``), an ``eval`` the evaluation id that
``memostore log`` lists and ``memostore show`` takes::

    memostore: train: miss key 8be0d2a7 (lr changed)
    memostore: train: stored eval 3f2a9c1d (ran 19.5 s)
    memostore: train: hit eval 3f2a9c1d (saved 19.5 s)
    memostore: train: hit eval 3f2a9c1d (saved 19.5 s; unseeded RNG (torch): served the stored run)
    memostore: train: miss key 5c01b7e4 (seeded: start state differs (the global RNG torch ...))

Single-flight waits and take-overs (``single_flight.py``) are always reported,
verbose or not: a call waiting for another process would otherwise look hung.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import printable

_ENV = "MEMOSTORE_VERBOSE"
_forced: bool | None = None
_from_env: bool | None = None  # read once: this runs on every call


def set_verbose(on: bool | None = True) -> None:
    """Print a line for every memoised call (None: follow ``$MEMOSTORE_VERBOSE`` again)."""
    global _forced, _from_env
    _forced = on
    _from_env = None


def enabled() -> bool:
    global _from_env
    if _forced is not None:
        return _forced
    if _from_env is None:
        _from_env = os.environ.get(_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return _from_env


def _name(symbol: str) -> str:
    return symbol.rpartition(":")[2] or symbol


def _emit(text: str) -> None:
    # One write per line: print() writes the text and its newline separately, and a
    # stream that other threads share (a Jupyter kernel's) can split them apart. A
    # line names what a record holds (a miss's reason): it reaches a terminal escaped.
    sys.stderr.write(f"memostore: {printable(text)}\n")
    sys.stderr.flush()


def report_hit(symbol: str, evaluation_id: str, body: dict[str, Any], note: str = "") -> None:
    """Say that a call hit, what it saved, and *note* (how its RNG condition held)."""
    _report(symbol, "hit eval", evaluation_id, "saved", body, note)


def report_stored(symbol: str, evaluation_id: str, body: dict[str, Any]) -> None:
    """Say under which evaluation id a miss was recorded, and how long its body ran."""
    _report(symbol, "stored eval", evaluation_id, "ran", body)


def report_miss(symbol: str, key: str, reason: str) -> None:
    _emit(f"{_name(symbol)}: miss key {key[:8]} ({reason})")


def _report(
    symbol: str, what: str, evaluation_id: str, took: str, body: dict[str, Any], note: str = ""
) -> None:
    seconds = body.get("duration_s")
    notes = [f"{took} {seconds:.1f} s"] if isinstance(seconds, (int, float)) else []
    if note:
        notes.append(note)
    tail = f" ({'; '.join(notes)})" if notes else ""
    _emit(f"{_name(symbol)}: {what} {evaluation_id[:8]}{tail}")


def report_single_flight(symbol: str, text: str) -> None:
    """Say that a call waits for another caller, or computes after all (always printed)."""
    _emit(f"{_name(symbol)}: {text}")
