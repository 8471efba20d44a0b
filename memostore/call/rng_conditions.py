"""When a stored evaluation answers a call: its global RNGs (by lineage, or exactly), its variables.

``@memo(rng=...)`` chooses the rule for the RNGs a stored body drew from
(``effects/draws.py`` records them, ``effects/seeding.py`` knows which are seeded):

* ``"lineage"`` (default): an RNG the program has not seeded matches any start
  state, since a run from entropy has no reproducible result and the stored
  run is as valid an outcome; an RNG it seeded must be in the state the stored
  body started from, so that a seeded program gets, on any mix of hits and
  misses, what a straight run gives;
* ``"exact"``: every RNG the body drew from must be in the recorded state,
  seeded or not;
* ``"ignore"``: RNGs are not looked at (nor set by a hit).

A body that read environment variables or files (``effects/reads.py``)
answers a call only while they hold what it read, whatever the mode.

Finding the evaluation stays O(1): the call's ref names the newest evaluation
of the key, tried first; a condition it fails is looked up once more by
``rng/<function>/<condition>``, where the condition digests the key, the
start states of the RNGs that must match and what the body read. Each
evaluation is named by the condition over all the RNGs it drew from
(``"exact"``), and also by the one over those seeded at its call when that is
fewer (a seeded program that draws from an unseeded RNG too); one that only
read variables or files is named by its condition once its key was stored with
other values (``recording.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..effects import draws, reads, seeding
from ..effects import rng as rngs
from ..odb.objects import canonical_json, digest_bytes
from ..odb.refs import ref_part
from ..odb.store import Store
from .hits import NotUsable

__all__ = [
    "MODES",
    "check_mode",
    "condition_ref_name",
    "matching_evaluation",
    "rng_ref_name",
    "rng_ref_names",
]

MODES = ("lineage", "exact", "ignore")


def check_mode(mode: str) -> str:
    """*mode* if it is one of :data:`MODES`, else a MemostoreError naming them."""
    if mode not in MODES:
        from ..errors import MemostoreError

        raise MemostoreError(
            f"@memo(rng={mode!r}) is not a mode: use rng='lineage' (the default: an RNG the "
            "program seeded must be in the state the stored call started from, an unseeded one "
            "matches any), rng='exact' (every RNG the body drew from must be in the recorded "
            "state) or rng='ignore' (global RNG states are neither checked nor set by a hit)"
        )
    return mode


def rng_condition(key: str, digests: Mapping[str, str]) -> str:
    """The condition digest of a call key and the RNG states it starts from."""
    return rngs.condition_key({"key": key, "rng": dict(digests)})


def rng_ref_name(function: str, key: str, digests: Mapping[str, str]) -> str:
    return f"rng/{ref_part(function)}/{rng_condition(key, digests)}"


_CONDITION_PREFIX = b"memostore:condition:1\n"


def condition_ref_name(
    function: str, key: str, digests: Mapping[str, str], observed: Mapping[str, Any] | None
) -> str:
    """The ref naming the evaluation of *key* that started from these RNG states and reads.

    *observed*: what the body read, as ``effects/reads.py`` gives it for conditions
    (``{"environ": ..., "files": ...}``). Without reads, the name :func:`rng_ref_name`
    gives (an RNG-only condition); with them, a digest of the key, the RNG states and
    the reads.
    """
    if not observed:
        return rng_ref_name(function, key, digests)
    condition = {"key": key, "rng": dict(digests), **observed}
    digest = digest_bytes(_CONDITION_PREFIX + canonical_json(condition))
    return f"rng/{ref_part(function)}/{digest}"


def rng_ref_names(
    function: str,
    key: str,
    record: Mapping[str, Any] | None,
    observed: Mapping[str, Any] | None = None,
) -> list[str]:
    """The ``rng/`` refs that name an evaluation with this ``rng`` record (none if it drew none).

    One over every RNG it drew from (what ``"exact"`` looks up), and one over
    the RNGs seeded at its call when those are fewer but some (what a program
    seeded the same way looks up by lineage); each with what it read.
    """
    conditions = draws.conditions(record)
    if not conditions:
        return []
    names = [condition_ref_name(function, key, conditions, observed)]
    seeded_at_call = draws.seeded_at_call(record)
    seeded = {name: d for name, d in conditions.items() if seeded_at_call.get(name)}
    if seeded and len(seeded) < len(conditions):
        names.append(condition_ref_name(function, key, seeded, observed))
    return names


class _Now:
    """The RNGs as they are at this call: lineage and state digest, read once each."""

    def __init__(self) -> None:
        self.digests: dict[str, str | None] = {}

    def read(self, names: list[str]) -> None:
        missing = [n for n in names if n not in self.digests]
        if not missing:
            return
        states = seeding.read(missing)
        for name in missing:
            state = states.get(name)
            self.digests[name] = None if state is None else rngs.state_digest(name, state)

    def required(self, conditions: Mapping[str, str], mode: str) -> dict[str, str | None]:
        """The RNGs among *conditions* that must match, with their digests now."""
        names = sorted(conditions)
        self.read(names)
        if mode != "exact":
            names = [n for n in names if seeding.lineage(n).seeded]
        return {name: self.digests[name] for name in names}


def _holds(conditions: Mapping[str, str], required: Mapping[str, str | None]) -> bool:
    return all(conditions[name] == digest for name, digest in required.items())


def matching_evaluation(
    store: Store, evaluation_id: str, body: dict[str, Any], function: str, key: str, mode: str
) -> tuple[str, dict[str, Any], str]:
    """The evaluation of this key whose conditions hold now, and a note on why they do.

    *evaluation_id* is the one the call's ref names; another, made from other
    start states of the RNGs that must match or having read other values or
    file contents, may be named by an ``rng/`` ref. Raises NotUsable (not a
    warning: another state is simply another call) if none holds. The note is
    "" unless an unseeded RNG was let through.
    """
    conditions = {} if mode == "ignore" else draws.conditions(body.get("rng"))
    has_reads = bool(body.get("environ") or body.get("files"))
    if not conditions and not has_reads:
        return evaluation_id, body, ""
    now = _Now()
    required = now.required(conditions, mode)
    current = reads.now(body) if has_reads else {}
    changed = reads.changed(body, current) if has_reads else ""
    if _holds(conditions, required) and not changed:
        return evaluation_id, body, _note(conditions, required)
    failing = [name for name, digest in required.items() if conditions[name] != digest]
    if not failing:
        reason = changed
    elif mode == "exact":
        reason = (
            f"the global RNG ({', '.join(failing)}) is in another state than the stored call "
            "started from (rng='exact')"
        )
    else:
        whys = "; ".join(f"{name} {seeding.lineage(name).why}" for name in failing)
        reason = f"seeded: start state differs ({whys}; the stored call started from another state)"
    other_state = NotUsable(reason, warn=False)
    digests = {name: digest for name, digest in required.items() if digest is not None}
    if len(digests) < len(required):
        raise other_state  # a seeded RNG not in use: no start state to look up
    other = store.refs.read(condition_ref_name(function, key, digests, current or None))
    if other is None or other == evaluation_id:
        raise other_state
    other_body = store.evaluation(other).body
    # The ref is only a hint: the record itself must say it is this call's, and hold.
    if other_body.get("function") != function or other_body.get("key") != key:
        raise other_state
    other_conditions = {} if mode == "ignore" else draws.conditions(other_body.get("rng"))
    other_required = now.required(other_conditions, mode)
    if not _holds(other_conditions, other_required) or reads.changed(other_body):
        raise other_state
    return other, other_body, _note(other_conditions, other_required)


def _note(conditions: Mapping[str, str], required: Mapping[str, Any]) -> str:
    free = sorted(set(conditions) - set(required))
    return f"unseeded RNG ({', '.join(free)}): served the stored run" if free else ""
