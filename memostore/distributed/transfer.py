"""Sending a stored evaluation from rank 0's store to the other stores of a job.

With node-local stores, a result rank 0 stored (or found) must reach the
ranks of the other nodes without them computing it. :func:`share` sends it
through the process group, the way ``pull`` copies between stores:

1. the writer of each receiving store puts the call's own arguments into it
   (it hashed them for the key, so it holds them: they are not sent);
2. rank 0 sends the ids of every object the evaluation reaches (children
   first), and each writer answers with the ones its store lacks;
3. rank 0 sends those objects' bytes, read from its store (checked against
   their ids), once; each writer stores them (each re-hashed as it is
   written), then the evaluation's refs, so the next job of that node finds
   it there;
4. a barrier: the other ranks of those nodes read it from their store after.

Every rank takes part in each step (collectives of the default group), those
that receive nothing included: a rank 0 store and N-1 node-local ones cost
each result's bytes once over the group, seen by every rank.
"""

from __future__ import annotations

import contextlib
import json
import struct
from typing import TYPE_CHECKING, Any

from ..call.rng_conditions import rng_ref_names
from ..errors import CorruptObject, MemostoreError
from ..odb import index
from ..records.evaluation import eval_ref_name

if TYPE_CHECKING:
    from ..call.keys import KeyedCall
    from ..odb.store import Store
    from ..records.group import Group
    from .topology import Topology


def closure(store: Store, root: str) -> list[tuple[str, bool]]:
    """Every object *root* reaches, as (id, is_document), each after the objects it links."""
    objects = store.objects
    order: list[tuple[str, bool]] = []
    seen: set[str] = {root}
    stack: list[tuple[str, bool]] = [(root, False)]
    while stack:
        object_id, expanded = stack.pop()
        if expanded:
            order.append((object_id, True))
            continue
        doc = objects.get_doc(object_id)
        stack.append((object_id, True))
        for blob in sorted(doc.links.blobs - seen):
            seen.add(blob)
            order.append((blob, False))
        for child in sorted(doc.links.docs - seen):
            seen.add(child)
            stack.append((child, False))
    return order


def share(
    group: Group,
    topo: Topology,
    store: Store,
    call: KeyedCall,
    evaluation_id: str | None,
    receivers: list[int],
) -> None:
    """Put rank 0's evaluation *evaluation_id* into the stores of *receivers* (collective).

    Args:
        group: the job.
        topo: which ranks share a store (the receivers are writers of theirs).
        store: this rank's store.
        call: the call the evaluation answers (its key and arguments).
        evaluation_id: the evaluation, on rank 0 (None there: nothing to send);
            ignored on the other ranks.
        receivers: the writer ranks whose stores get it (the same list on every rank).

    A receiving store that cannot be written leaves its ranks without the
    evaluation (they then miss, as the caller decides); rank 0 failing to read
    its own objects sends nothing, and every rank returns.
    """
    if not receivers:
        return
    me = group.rank
    receiving = me in receivers
    if receiving:
        with contextlib.suppress(Exception):
            call.sink.flush(store.objects)  # the arguments: the writer holds them already
    listing: Any = None
    if me == 0 and evaluation_id is not None:
        try:
            listing = (evaluation_id, closure(store, evaluation_id))
        except (MemostoreError, OSError):
            listing = None
    listing = group.broadcast_object(listing)
    if listing is None:
        return
    evaluation_id, ids = listing
    lacking: list[int] = []
    if receiving:
        objects = store.objects
        lacking = [i for i, (object_id, _) in enumerate(ids) if not objects.contains(object_id)]
    wanted = sorted({i for row in group.all_gather_object(lacking) for i in row})
    payload = None
    if me == 0:
        try:
            payload = _pack(store, ids, wanted)
        except (MemostoreError, OSError):
            payload = None  # damaged or gone meanwhile: the receivers go without it
    data = group.broadcast_bytes(payload)
    if receiving and data:
        with contextlib.suppress(Exception):
            _adopt(store, call, ids, data, evaluation_id)
    group.barrier()  # the writers are done: their nodes' ranks may read now


def collect(
    group: Group,
    topo: Topology,
    store: Store,
    roots: list[str | None],
    blobs: list[list[str]],
) -> None:
    """Put each rank's value *roots[r]* (and *blobs[r]*) into rank 0's store, from other stores.

    Collective: for each rank whose store is not rank 0's, that rank sends the
    ids of the objects its root reaches (and of its blobs), rank 0 answers
    with those it lacks, and that rank sends their bytes (checked against
    their ids as rank 0 writes them). Used for results that differ by rank (``agreement.py``)
    before rank 0 publishes them; :func:`share` then sends the evaluation on.
    A rank that cannot read its own objects sends nothing: rank 0 then lacks
    them, and must not publish.
    """
    me = group.rank
    for src in range(1, group.world):
        if topo.writer(src) == topo.writer(0):
            continue  # the same store as rank 0's: its objects are there already
        listing: Any = None
        if me == src and roots[src] is not None:
            try:
                extra = [(blob, False) for blob in blobs[src]]  # code stored by value
                listing = extra + closure(store, roots[src])
            except (MemostoreError, OSError):
                listing = None
        listing = group.broadcast_object(listing, src=src)
        if listing is None:
            continue
        lacking: list[int] = []
        if me == 0:
            lacking = [
                i
                for i, (object_id, _) in enumerate(listing)
                if not store.objects.contains(object_id)
            ]
        wanted = group.broadcast_object(lacking, src=0)
        payload = None
        if me == src:
            try:
                payload = _pack(store, listing, wanted)
            except (MemostoreError, OSError):
                payload = None
        data = group.broadcast_bytes(payload, src=src)
        if me == 0 and data:
            with contextlib.suppress(Exception):
                _add_objects(store, listing, data)


def _pack(store: Store, ids: list[tuple[str, bool]], wanted: list[int]) -> bytes:
    """Header (json: [[index, size], ...]) then each wanted object's bytes, checked."""
    parts: list[bytes] = []
    header: list[list[int]] = []
    for i in wanted:
        data = store.objects.get_bytes(ids[i][0])
        header.append([i, len(data)])
        parts.append(data)
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(parts)


def _add_objects(store: Store, ids: list[tuple[str, bool]], data: bytes) -> None:
    """Store the objects packed in *data* (children first, as sent), each checked, durably."""
    (size,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + size])
    view = memoryview(data)
    offset = 8 + size
    objects = store.objects
    for i, length in header:
        expected = ids[i][0]
        got = objects.add_bytes(view[offset : offset + length])
        offset += length
        if got != expected:
            raise CorruptObject(expected, got, "bytes sent by another rank")
    objects.sync()


def _adopt(
    store: Store, call: KeyedCall, ids: list[tuple[str, bool]], data: bytes, evaluation_id: str
) -> None:
    """Store the sent objects (children first, as sent), then the evaluation's refs."""
    _add_objects(store, ids, data)
    objects = store.objects
    if not objects.contains(evaluation_id):
        return
    body = store.evaluation(evaluation_id).body
    symbol = call.fn.symbol
    for name in rng_ref_names(symbol, call.key, body.get("rng")):
        store.refs.set(name, evaluation_id)
    store.refs.set(eval_ref_name(symbol, call.key), evaluation_id)
    index.record(store, evaluation_id, body)
