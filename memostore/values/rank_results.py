"""Results that differ by rank: stored together, restored each to its own rank.

A memoised call made by every rank of a torch.distributed job may return a
different value on each rank (each rank's shard of a sharded model). The
ranks then store one result each, and the evaluation's result is a *per-rank*
value document naming them, rank by rank (``docs/format.md``)::

    {"$": "per_rank", "world": N, "results": [{"$": "ref", "id": ...}, ...]}

Parts equal on several ranks are one object in the store (content
addressing), so a model whose layers are replicated costs one copy of them.

Restoring it (:func:`decode_result`) gives each rank its own result when the
job restoring it has the same number of ranks (:func:`as_rank` says which
rank restores). A job of another size (a single process counts as one rank)
can use it only when the ranks' results differ in values whose codec can put
the ranks' parts together (:meth:`Codec.merge_ranks`: DTensors, which are then
resharded onto the new job's mesh), and are equal everywhere else; any other
difference raises :class:`~memostore.errors.DecodeError` naming why (a memo
hit: a miss).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import DecodeError, MalformedObject, MemostoreError
from ..odb.objects import KIND_VALUE, Doc, Links
from .codecs import Codec

if TYPE_CHECKING:
    from ..odb.store import Store
    from .decoding import Decoder

PER_RANK = "per_rank"

# (rank, world size) of the job restoring a result; unset: a process of its own.
_place: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "memostore_rank", default=None
)


@contextlib.contextmanager
def as_rank(rank: int, world: int) -> Iterator[None]:
    """Results restored inside are rank *rank*'s of a job of *world* ranks."""
    token = _place.set((rank, world))
    try:
        yield
    finally:
        _place.reset(token)


def place() -> tuple[int, int]:
    """(rank, world size) results are restored for: (0, 1) outside :func:`as_rank`."""
    return _place.get() or (0, 1)


def per_rank_doc(result_ids: list[str]) -> Doc:
    """The value document of a result stored per rank (``result_ids[r]``: rank r's)."""
    node = {
        "$": PER_RANK,
        "world": len(result_ids),
        "results": [{"$": "ref", "id": i} for i in result_ids],
    }
    return Doc(KIND_VALUE, {"node": node}, Links(docs=set(result_ids)))


def rank_result_ids(node: Any) -> list[str] | None:
    """Each rank's result id if *node* is a per-rank result's node, else None."""
    if not isinstance(node, dict) or node.get("$") != PER_RANK:
        return None
    results = node.get("results")
    world = node.get("world")
    if (
        not isinstance(results, list)
        or not isinstance(world, int)
        or world != len(results)
        or world < 1
        or not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in results)
    ):
        raise MalformedObject("a per-rank result document does not name one result per rank")
    return [r["id"] for r in results]


def depends_on_rank(store: Store, ref: str) -> bool:
    """Whether the evaluation *ref* names now was stored per rank.

    Its call then returns different results on different ranks: a result of
    it computed again by a job of another size (or a process of its own)
    must not pass for every rank's, even where that job's ranks agree, so it
    is stored per rank too (see :func:`decode_result`).
    """
    try:
        evaluation_id = store.refs.read(ref)
        if evaluation_id is None:
            return False
        result = store.evaluation(evaluation_id).body.get("result")
        if not isinstance(result, str):
            return False
        return rank_result_ids(store.objects.get_doc(result).body.get("node")) is not None
    except Exception:  # unreadable: not proof of anything
        return False


def decode_result(decoder: Decoder, result_id: str) -> Any:
    """The result stored as *result_id*, as this rank's (see :func:`as_rank`)."""
    ids = rank_result_ids(decoder.objects.get_doc(result_id).body.get("node"))
    if ids is None:
        return decoder.decode_value(result_id)
    rank, world = place()
    if world == len(ids):
        return decoder.decode_value(ids[rank])
    if len(ids) < 2 or all(i == ids[0] for i in ids):
        # Stored per rank because the call's result depends on the rank (the ranks of
        # an earlier job differed), by ranks that happened to agree: nothing to reshard.
        raise DecodeError(
            f"it was stored per rank by {_ranks(len(ids))} (the call's result depends on "
            f"the rank) and is restored in {_ranks(world, here=True)}: run {_ranks(len(ids))}"
            " to use it"
        )
    merged, made = merge_results(decoder, ids)
    real = decoder.objects
    decoder.objects = _WithDocs(real, made)  # type: ignore[assignment]
    try:
        result = decoder.decode_value(merged)
    finally:
        decoder.objects = real
    # Made here, not stored: no digest of a restored object may name them.
    decoder.restored[:] = [(obj, i) for obj, i in decoder.restored if i not in made]
    return result


def merge_results(decoder: Decoder, ids: list[str]) -> tuple[str, dict[str, Doc]]:
    """One value document standing for every rank's result, and the documents made for it.

    Raises DecodeError when the results differ where no codec can merge them.
    """
    merger = _Merger(decoder)
    try:
        root = merger.document(tuple(ids))
    except MemostoreError:
        raise
    except RecursionError:
        raise DecodeError("a per-rank result is nested too deeply to restore") from None
    except _Unmergeable as exc:
        where = f" (first in a {exc.tag} value)" if exc.tag else ""
        raise DecodeError(
            f"it was stored per rank by {_ranks(len(ids))} and is restored in "
            f"{_ranks(place()[1], here=True)}, but its ranks' results differ in more than "
            f"the shards of DTensors on a 1-D device mesh{where}, which alone can be "
            f"resharded: run {_ranks(len(ids))} to use it"
        ) from None
    except Exception as exc:  # a malformed node: the writer's, not this reader's, fault
        raise DecodeError(f"a per-rank result cannot be put together ({exc!r})") from exc
    return root, merger.made


def _ranks(n: int, here: bool = False) -> str:
    if n == 1 and here and _place.get() is None:
        return "a process of its own"
    return "1 rank" if n == 1 else f"a job of {n} ranks"


class _Unmergeable(Exception):
    def __init__(self, tag: str | None) -> None:
        super().__init__(tag)
        self.tag = tag


class _Merger:
    """Walks the ranks' documents side by side, merging where they differ."""

    def __init__(self, decoder: Decoder) -> None:
        self.objects = decoder.objects
        self.codecs = decoder.codecs
        self.made: dict[str, Doc] = {}
        self._done: dict[tuple[str, ...], str] = {}

    def document(self, ids: tuple[str, ...]) -> str:
        if all(i == ids[0] for i in ids):
            return ids[0]  # equal on every rank: the stored document itself
        found = self._done.get(ids)
        if found is not None:
            return found
        docs = [self.objects.get_doc(i) for i in ids]
        if any(d.kind != KIND_VALUE for d in docs):
            raise MalformedObject("a per-rank result names a document that is not a value")
        links = Links()
        for d in docs:
            links.update(d.links)
        node = self.node([d.body.get("node") for d in docs], None)
        doc = Doc(KIND_VALUE, {"node": node}, links)
        self.made[doc.id] = doc
        self._done[ids] = doc.id
        return doc.id

    def node(self, nodes: list[Any], tag: str | None) -> Any:
        first = nodes[0]
        if all(n == first for n in nodes[1:]):
            return first
        if isinstance(first, list) and all(
            isinstance(n, list) and len(n) == len(first) for n in nodes
        ):
            return [self.node(list(column), tag) for column in zip(*nodes, strict=True)]
        if not (isinstance(first, dict) and all(isinstance(n, dict) for n in nodes)):
            raise _Unmergeable(tag)
        if any(n.keys() != first.keys() for n in nodes):
            raise _Unmergeable(tag)
        kind = first.get("$")
        if any(n.get("$") != kind for n in nodes):
            raise _Unmergeable(tag)
        if kind == "ref":
            if any(n.get("&") != first.get("&") for n in nodes):
                raise _Unmergeable(tag)
            return {**first, "id": self.document(tuple(n["id"] for n in nodes))}
        if isinstance(kind, str) and "." in kind:  # a codec's node (core tags have no dot)
            codec = self.codecs.for_tag(kind)
            if codec is not None and type(codec).merge_ranks is not Codec.merge_ranks:
                merged = codec.merge_ranks(nodes)
                if merged is None:
                    raise _Unmergeable(kind)
                return merged
            tag = kind
        return {k: self.node([n[k] for n in nodes], tag) for k in first}


class _WithDocs:
    """An object database seen with the documents a merge made on top of it."""

    def __init__(self, objects: Any, docs: dict[str, Doc]) -> None:
        self._objects = objects
        self._docs = docs

    def get_doc(self, object_id: str) -> Doc:
        doc = self._docs.get(object_id)
        return doc if doc is not None else self._objects.get_doc(object_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._objects, name)
