"""Whether the ranks of a job returned the same result: stored once, or rank by rank.

In ``distributed="all"`` mode every rank runs the body of a miss. Once every
body has returned (``calls.py`` exchanges that first), the ranks compare
their results before anything is published:

1. rank 0 stores its result (the evaluation's usual write: objects first),
   every other rank hashes its own (the digest cache helps; a result holding
   shards, such as a sharded model, it stores at once instead: it will
   differ), and one all-gather of 33 bytes per rank (a flag, and the
   result's id) tells every rank every rank's id;
2. equal ids: rank 0 publishes its result as the evaluation's, as for a
   single process (the other ranks wrote nothing);
3. different ids: each other rank stores its own result into the store,
   a second all-gather gives rank 0 their ids (and the code they stored by
   value), and rank 0 publishes a *per-rank* result naming them
   (``values/rank_results.py``): on a hit every rank restores its own;
4. a rank that could not hash or store its result (or rank 0 failing to
   store its own): nothing is published, with one warning on rank 0 (and on
   the failing rank, with its own reason). The result is returned all the same.

Every rank takes part in each all-gather whatever happens to it, so no rank
is left waiting: rank 0 joins from inside its store (:meth:`Agreement.write`),
or, when its store never gets there (an argument could not be stored),
from :meth:`Agreement.finish`.

With node-local stores (``topology.py``), each rank stores its result in its
own node's store, and the results rank 0's store lacks are sent to it through
the process group before it publishes (``transfer.collect``); the evaluation
then reaches the other nodes' stores as any other (``transfer.share``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ..call import recording
from ..errors import warn
from ..records.evaluation import summarize
from ..values.codecs import registry
from ..values.encoding import Encoder, HashSink, StoreSink
from ..values.rank_results import depends_on_rank, per_rank_doc
from . import transfer

if TYPE_CHECKING:
    from ..odb.store import Store
    from ..records.group import Group
    from .topology import Topology

_OK = b"\1"
_FAILED = b"\0"


class Agreement:
    """One ``"all"``-mode miss's agreement on its result (a :class:`recording.ResultWriter`).

    Rank 0 passes it to its store of the result; the other ranks call
    :meth:`settle` once their body has returned. Between, :meth:`arm` says that
    every rank's body returned (the agreement is then owed by every rank).
    """

    def __init__(self, symbol: str, ref: str, store: Store, group: Group, topo: Topology) -> None:
        self.symbol = symbol
        self.ref = ref  # the call's ref
        self.store = store
        self.group = group
        self.topo = topo
        self.armed = False
        self.per_rank = False
        self._joined = False

    def arm(self) -> None:
        """Every rank's body returned: each rank now owes the exchange of results."""
        self.armed = True

    # -- rank 0 ---------------------------------------------------------------------------
    def write(self, encoder: Encoder, result: Any) -> str:
        """Rank 0: store its result, agree with the other ranks, return the id to publish."""
        self._joined = True
        try:
            own = encoder.encode_value(result)
        except BaseException:
            with contextlib.suppress(Exception):
                self._compare(None)
            raise
        ids = self._compare(own)
        failed = [r for r, i in enumerate(ids) if i is None]
        if failed:
            raise recording.NotStorable(
                f"rank{'s' if len(failed) > 1 else ''} {_ranks(failed)} could not hash "
                "or store its result (it warned why)"
            )
        if all(i == own for i in ids):
            if depends_on_rank(self.store, self.ref):
                # Equal here, but the call was seen to differ by rank: this job's result.
                self.per_rank = True
                return encoder.sink.put_doc(per_rank_doc([own] * len(ids)))
            return own
        stored = self.group.all_gather_object((own, {}, None))
        failed = [r for r, row in enumerate(stored) if row[0] is None]
        if failed:
            said = "; ".join(f"rank {r}: {stored[r][2]}" for r in failed)
            raise recording.NotStorable(f"it differs by rank, and not all ranks stored it ({said})")
        results = [row[0] for row in stored]
        if not self.topo.shared:
            transfer.collect(self.group, self.topo, self.store, results, _code(stored))
            if not all(map(self.store.objects.contains, results)):
                raise recording.NotStorable(
                    "it differs by rank, and another node's result did not reach this store"
                )
            for payloads in _code(stored):
                if not all(map(self.store.objects.contains, payloads)):
                    raise recording.NotStorable(
                        "it differs by rank, and the code another node stored by value "
                        "did not reach this store"
                    )
        for _, payloads, _ in stored:
            encoder.payloads.update(payloads)
        self.per_rank = True
        return encoder.sink.put_doc(per_rank_doc(results))

    def summary(self, result: Any) -> str:
        if self.per_rank:
            return f"per-rank result ({self.group.world} ranks), rank 0: {summarize(result)}"
        return summarize(result)

    def finish(self) -> None:
        """Rank 0, after its call: take part in the exchange if its store never did."""
        if self.armed and not self._joined:
            self._joined = True
            self._compare(None)

    # -- the other ranks ------------------------------------------------------------------
    def settle(self, result: Any) -> None:
        """A rank other than 0: compare its result with rank 0's; store it if they differ.

        A result holding shards (:meth:`Codec.holds_shards`) is stored at once,
        while rank 0 stores its own, rather than hashed first: it will differ.
        Whatever fails here is warned about only once every exchange is made
        (a warning may raise: ``-W error``), so rank 0 is never left waiting.
        """
        row: tuple[str | None, dict[str, str], str | None] | None = None
        trouble = ""
        try:
            if _holds_shards(result):
                row = self._store(result)
                digest, trouble = row[0], row[2] or ""
            else:
                digest = Encoder(HashSink()).encode_value(result)
        except Exception as exc:
            digest = None
            trouble = trouble or f"its result cannot be hashed ({type(exc).__name__}: {exc})"
        ids = self._compare(digest)
        if None not in ids and not all(i == ids[0] for i in ids):
            if row is None:
                row = self._store(result)
                trouble = row[2] or ""
            stored = self.group.all_gather_object(row)
            if not self.topo.shared and all(r[0] is not None for r in stored):
                results = [r[0] for r in stored]
                transfer.collect(self.group, self.topo, self.store, results, _code(stored))
        if trouble:
            self._warn(trouble)

    def _store(self, result: Any) -> tuple[str | None, dict[str, str], str | None]:
        """Store this rank's result: (its id, the code it stored by value, None) or why not."""
        sink = StoreSink(self.store.objects)
        encoder = Encoder(sink, verify=True)
        try:
            stored = encoder.encode_value(result)
            self.store.objects.sync()
            return (stored, dict(encoder.payloads), None)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}{recording.fix(exc, self.store)}"
            return (None, {}, f"its result differs by rank and cannot be stored ({reason})")
        finally:
            sink.abort()

    # -- both -----------------------------------------------------------------------------
    def _compare(self, digest: str | None) -> list[str | None]:
        """Every rank's result id (None where a rank could not tell)."""
        mine = _FAILED + bytes(32) if digest is None else _OK + bytes.fromhex(digest)
        rows = self.group.all_gather_fixed(mine)
        return [row[1:].hex() if row[:1] == _OK else None for row in rows]

    def _warn(self, reason: str) -> None:
        warn(
            f"the result of {self.symbol} on rank {self.group.rank} is not stored: {reason}; "
            "it is returned, and the next call will run the function again"
        )


def _code(stored: list[tuple[Any, dict[str, str], Any]]) -> list[list[str]]:
    """Each rank's blobs of code stored by value, from the rows of the second all-gather."""
    return [sorted(payloads.values()) for _, payloads, _ in stored]


def _holds_shards(result: Any, depth: int = 0) -> bool:
    """Whether *result*, or a value in its first containers, holds a rank's shard."""
    if isinstance(result, (tuple, list)):
        items: Any = result
    elif isinstance(result, dict):
        items = result.values()
    else:
        codec = registry.for_type(type(result))
        return codec is not None and codec.holds_shards(result)
    return depth < 3 and any(_holds_shards(item, depth + 1) for item in list(items)[:64])


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
