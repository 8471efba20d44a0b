"""A hit, prepared and then committed: the result, the argument effects, the RNG states.

A hit must leave the program as the miss did (``docs/concepts.md``, the hit
contract). :func:`prepare` reads everything a hit needs and plans every change
to the caller's objects without making any; only :meth:`Hit.commit` changes
the program (the caller's arguments and globals, the global RNGs). A stored
evaluation that cannot be used (its RNG condition does not hold, an effect
cannot be replayed, an object is missing or damaged) is therefore a miss that
has changed nothing.

Conditions: an evaluation whose body drew from a global RNG is the answer
of a call only while that RNG is in the state the body started from, and one
whose body read environment variables only while they hold the values it
read (``effects/process.py``). The call's ref names the newest evaluation of
the key; each one with an RNG condition is also named by
``rng/<function>/<condition>``, where the condition is the key plus the
digests of the RNG states it started from (and the variables it read), so
several starting states of one call can all be kept; one with only variables
is named so once the key was stored with other values (``recording.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..effects import process, rng
from ..effects.arguments import Watched, plan_replay, resolver, substitute_aliases
from ..effects.places import RESULT
from ..effects.relations import Relations
from ..effects.replay import MISSING, NotReplayable, Planner
from ..odb.objects import canonical_json, digest_bytes
from ..odb.refs import ref_part
from ..odb.store import Store
from ..values.decoding import Decoder

__all__ = [
    "Hit",
    "NotUsable",
    "condition_ref_name",
    "matching_evaluation",
    "prepare",
    "rng_condition",
    "rng_ref_name",
]


class NotUsable(Exception):
    """The stored evaluation does not answer this call.

    Attributes:
        reason: why, for the verbose line (``verbose.py``).
        warn: whether the caller should be warned (something is wrong), rather
            than the call simply being another call (another RNG state).
    """

    def __init__(self, reason: str, warn: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.warn = warn


def rng_condition(key: str, digests: dict[str, str]) -> str:
    """The condition digest of a call key and the RNG states it starts from."""
    return rng.condition_key({"key": key, "rng": digests})


def rng_ref_name(function: str, key: str, digests: dict[str, str]) -> str:
    return f"rng/{ref_part(function)}/{rng_condition(key, digests)}"


@dataclass
class Hit:
    """A usable stored evaluation, with every change to the program planned."""

    evaluation_id: str
    body: dict[str, Any]
    decoder: Decoder
    result: Any
    watched: Watched | None = None
    planner: Planner | None = None
    bindings: list[tuple[Any, str, Any]] = field(default_factory=list)
    rng_states: dict[str, bytes] = field(default_factory=dict)
    related: bool = False  # the result's relations to the arguments are applied

    def commit(self) -> Any:
        """Apply the planned effects and RNG states; return the result to give back."""
        process.note_environ(self.body.get("environ"))  # for a body this hit runs inside
        if self.planner is not None:
            self.planner.commit()
        for namespace, name, value in self.bindings:
            namespace[name] = value
        if self.rng_states:
            rng.restore(self.rng_states)
        aliases = self.body.get("aliases")
        if aliases and self.watched is not None and not self.related:
            return substitute_aliases(self.result, aliases, self.watched)
        return self.result


def _conditions(body: dict[str, Any]) -> dict[str, str]:
    """RNG name -> digest of the state the body drew from (RNGs it seeded first: none)."""
    record = body.get("rng") or {}
    return {name: r["before"] for name, r in record.items() if r.get("before")}


def _rng_usable(body: dict[str, Any]) -> bool:
    conditions = _conditions(body)
    if not conditions:
        return True
    return rng.current_digests(conditions) == conditions


def _environ_differs(body: dict[str, Any]) -> list[str]:
    """The environment variables the body read that hold another value now."""
    recorded = body.get("environ")
    if not recorded:
        return []
    now = process.current_environ(recorded)
    return [name for name, value in recorded.items() if now.get(name) != value]


def condition_ref_name(
    function: str, key: str, digests: dict[str, str], environ: dict[str, Any] | None
) -> str:
    """The ref naming the evaluation of *key* that started from these RNG states and variables.

    Without environment variables, the name :func:`rng_ref_name` gives (an RNG-only
    condition); with them, a digest of the key, the RNG states and the variables.
    """
    if not environ:
        return rng_ref_name(function, key, digests)
    condition = {"key": key, "rng": digests, "environ": environ}
    return f"rng/{ref_part(function)}/{digest_bytes(_CONDITION_PREFIX + canonical_json(condition))}"


_CONDITION_PREFIX = b"memostore:condition:1\n"


def matching_evaluation(
    store: Store,
    evaluation_id: str,
    body: dict[str, Any],
    function: str,
    key: str,
    track_rng: bool = True,
) -> tuple[str, dict[str, Any]]:
    """The evaluation of this key whose RNG and environment conditions hold now (else NotUsable).

    *evaluation_id* is the one the call's ref names; another, made from other
    RNG states or environment variables, may be named by the condition ref of
    the states now.
    """

    def usable(b: dict[str, Any]) -> bool:
        return (not track_rng or _rng_usable(b)) and not _environ_differs(b)

    if usable(body):
        return evaluation_id, body
    conditions = _conditions(body) if track_rng else {}
    if conditions and not _rng_usable(body):
        names = ", ".join(sorted(conditions))
        other_state = NotUsable(
            f"the global RNG ({names}) is in another state than the stored call started from",
            warn=False,
        )
    else:
        names = ", ".join(_environ_differs(body))
        other_state = NotUsable(
            f"the environment variable {names} the stored call read has another value now",
            warn=False,
        )
    now = rng.current_digests(conditions) if conditions else {}
    if now is None:
        raise other_state
    recorded = body.get("environ") or {}
    environ = process.current_environ(recorded) if recorded else None
    other = store.refs.read(condition_ref_name(function, key, now, environ))
    if other is None or other == evaluation_id:
        raise other_state
    other_body = store.evaluation(other).body
    # The ref is only a hint: the record itself must say it is this call's.
    if (
        other_body.get("function") != function
        or other_body.get("key") != key
        or not usable(other_body)
    ):
        raise other_state
    return other, other_body


def prepare(
    store: Store,
    evaluation_id: str,
    body: dict[str, Any],
    watched: Watched | None,
    track_rng: bool,
    before_decode: Callable[[dict[str, Any]], None] | None = None,
    remember: Callable[[Decoder, str], None] | None = None,
) -> Hit:
    """Read the result and effects of a stored evaluation and plan the hit.

    Raises NotUsable (with a reason for effects that cannot be replayed), or
    the store's errors (ObjectNotFound, StaleCode, DecodeError, ...).
    """
    if body.get("status") != "ok" or body.get("result") is None:
        raise NotUsable(f"the stored call ended with status {body.get('status')!r}", warn=False)
    differs = _environ_differs(body)
    if differs:
        raise NotUsable(
            f"the environment variable {', '.join(differs)} the stored call read has another "
            "value now",
            warn=False,
        )
    if before_decode is not None:
        before_decode(body)
    decoder = Decoder(store.objects, body.get("payloads") or {})
    result = decoder.decode_value(body["result"])
    effects = body.get("effects") or {}
    sources = {name: decoder.decode_value(doc_id) for name, doc_id in effects.items()}
    hit = Hit(evaluation_id, body, decoder, result, watched)
    if remember is not None:
        # Restored objects enter the hash cache first: the planner skips the parts
        # of an argument that the cache proves equal to their post-call state.
        remember(decoder, evaluation_id)
    records = body.get("identity")
    if (effects or records) and watched is None:
        raise NotUsable("its effects on the arguments are not known")
    if effects or records:
        assert watched is not None
        relations = None
        if records:
            relations = Relations(records, resolver(watched), {**sources, RESULT: result})
        hit.planner = Planner(relations=relations)
        try:
            if effects:
                hit.bindings = plan_replay(hit.planner, watched, sources, body.get("rebound") or ())
            if relations is not None:
                hit.result = hit.planner.root(RESULT, MISSING, result)
                hit.related = True
        except NotReplayable as exc:
            raise NotUsable(f"its effects cannot be replayed here ({exc})") from None
    if track_rng and body.get("rng"):
        hit.rng_states = {
            name: bytes(store.objects.get_bytes(r["after"])) for name, r in body["rng"].items()
        }
    return hit
