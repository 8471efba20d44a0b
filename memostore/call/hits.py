"""A hit, prepared and then committed: the result, the argument effects, the RNG states.

A hit must leave the program as the miss did (``docs/concepts.md``, the hit
contract). :func:`prepare` reads everything a hit needs and plans every change
to the caller's objects without making any; only :meth:`Hit.commit` changes
the program (the caller's arguments and globals, the global RNGs). A stored
evaluation that cannot be used (pulled but not signed by an allowed signer, its
RNG condition does not hold, an effect cannot be replayed, an object is
missing or damaged) is therefore a miss that has changed nothing.

Which stored evaluation answers a call whose body drew from global RNGs
(seeded or not, ``@memo(rng=...)``) or read environment variables or files is decided
before, in ``rng_conditions.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..effects import draws, reads
from ..effects.arguments import Watched, plan_replay, resolver, substitute_aliases
from ..effects.places import RESULT
from ..effects.relations import Relations
from ..effects.replay import MISSING, NotReplayable, Planner
from ..odb.store import Store
from ..trust import signers
from ..values.decoding import Decoder
from ..values.rank_results import decode_result

__all__ = ["Hit", "NotUsable", "prepare"]


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
    rng_note: str = ""  # how the RNG condition held, for the verbose line
    related: bool = False  # the result's relations to the arguments are applied

    def commit(self) -> Any:
        """Apply the planned effects and RNG states; return the result to give back."""
        reads.note(self.body)  # for a body this hit runs inside
        if self.planner is not None:
            self.planner.commit()
        for namespace, name, value in self.bindings:
            namespace[name] = value
        if self.rng_states:
            draws.restore(self.rng_states, self.body.get("rng"))
        aliases = self.body.get("aliases")
        if aliases and self.watched is not None and not self.related:
            return substitute_aliases(self.result, aliases, self.watched)
        return self.result


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
    # The one gate of pulled results: before anything of them is decoded or planned.
    refused = signers.refusal(store, evaluation_id)
    if refused is not None:
        raise NotUsable(refused)
    changed = reads.changed(body)
    if changed:
        raise NotUsable(changed, warn=False)
    if before_decode is not None:
        before_decode(body)
    decoder = Decoder(store.objects, body.get("payloads") or {}, orders=body.get("orders") or "")
    result = decode_result(decoder, body["result"])  # this rank's, when stored per rank
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
