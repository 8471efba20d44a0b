"""Which ranks of a job share a store: one shared store, or one per node (node-local).

Found once per job and store by looking, not by guessing from host names or
paths (two nodes may mount one NFS store at different paths; two ranks of one
node may be given different stores): each rank creates a probe file with a
random name in its store's ``tmp/`` directory, the ranks exchange the names,
and each rank checks which of them it can see in its own store. Ranks that
see each other's probes share a store; the lowest of them is that store's
*writer*, the one rank that writes results other ranks computed or sent into
it. The probes are removed once every rank has looked.

On NFS the probe of another machine is seen at once: its name was never
looked up before on this client, so no cached (negative) lookup can hide it,
and creating it is visible to other clients when the creator closes it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..odb.store import Store
    from ..records.group import Group

_PROBE = "rank-probe-"


@dataclass(frozen=True)
class Topology:
    """The ranks of a job grouped by the store they see.

    Attributes:
        group_of: for each rank, the sorted ranks sharing its store (itself included).
    """

    group_of: tuple[tuple[int, ...], ...]

    @property
    def shared(self) -> bool:
        """Whether every rank uses one store."""
        return len(self.group_of[0]) == len(self.group_of)

    def writer(self, rank: int) -> int:
        """The rank that writes into *rank*'s store."""
        return self.group_of[rank][0]

    def writers(self) -> list[int]:
        """The writer of every store but rank 0's."""
        return sorted({g[0] for g in self.group_of if 0 not in g})


_known: dict[tuple[int, str], Topology] = {}


def key_of(group: Group, store: Store) -> tuple[int, str]:
    where = str(store.root) if store.root is not None else f"memory:{id(store)}"
    return (group.job, where)


def known(group: Group, store: Store) -> bool:
    return key_of(group, store) in _known


def topology(group: Group, store: Store, refresh: bool = False) -> Topology:
    """The job's topology for *store*, probed unless known (then collective: all ranks call it).

    With *refresh*, probed again whatever this rank knows: every rank must then
    probe, those that knew it included, or the ones probing would wait alone.
    """
    found = None if refresh else _known.get(key_of(group, store))
    if found is None:
        found = _known[key_of(group, store)] = _probe(group, store)
    return found


def _probe(group: Group, store: Store) -> Topology:
    token = secrets.token_bytes(16)
    directory = None
    mine = None
    if store.root is not None:
        try:
            directory = store.subdir("tmp")
            mine = directory / f"{_PROBE}{token.hex()}"
            fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
        except OSError:
            directory = mine = None  # an unwritable store: this rank shares with no one
    tokens = group.all_gather_fixed(token)
    seen = bytearray(group.world)
    for rank, other in enumerate(tokens):
        if rank == group.rank:
            seen[rank] = 1
        elif directory is not None and mine is not None:
            seen[rank] = (directory / f"{_PROBE}{other.hex()}").exists()
    # Every rank has looked once this gather returns: the probe may go.
    table = group.all_gather_fixed(bytes(seen))
    if mine is not None:
        with contextlib.suppress(OSError):
            os.unlink(mine)
    return Topology(tuple(tuple(j for j in range(group.world) if row[j]) for row in table))
