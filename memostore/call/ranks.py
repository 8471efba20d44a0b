"""A memoised call inside a torch.distributed job: the modes, the key, and the way out.

``@memo(distributed=...)`` takes one of :data:`MODES` (``docs/clusters.md``).
In ``per_rank`` mode a rank's call is keyed with its rank and the world size
(:func:`rank_key`). In the other modes, a call made by a rank of a job of two
or more ranks is handed to the group runner that :mod:`memostore.distributed`
registers (:func:`use_group_runner`, done by ``import memostore``), through the
public seam of the memoised function (``memoize.MemoSeam``). A call in a
process without a process group stops at :func:`run_in_group`'s first check
and never enters :mod:`memostore.distributed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from ..odb.objects import canonical_json, digest_bytes
from ..records import group as groups

if TYPE_CHECKING:
    from ..odb.store import Store
    from .keys import KeyedCall

MODES = ("all", "leader", "per_rank")


class Computed:
    """The outcome of a call computed by the ranks: the result this rank returns."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


# (seam, store, call, args, kwargs) -> a Hit to commit, a Computed result, or None.
GroupRunner = Callable[[Any, "Store", "KeyedCall", tuple[Any, ...], dict[str, Any]], Any]
_runner: GroupRunner | None = None


def use_group_runner(runner: GroupRunner) -> None:
    """Make calls of ranks of a job through *runner* (``memostore.distributed`` registers it)."""
    global _runner
    _runner = runner


def check_mode(mode: Any) -> str:
    """The ``@memo(distributed=...)`` value, checked at decoration time."""
    if mode in MODES:
        return str(mode)
    raise MemostoreError(
        f"@memo(distributed={mode!r}) is not a mode: use distributed='all' (the default: in "
        "a torch.distributed job every rank runs a miss, rank 0 stores it once, every rank "
        "restores a hit), distributed='leader' (rank 0 alone runs a miss, the other ranks "
        "receive its result) or distributed='per_rank' (each rank's call is its own: keyed "
        "with its rank and the world size)"
    )


def rank_key(mode: str, key: str) -> str:
    """The call key for this rank: *key*, or in ``per_rank`` mode one with rank and world size."""
    if mode != "per_rank":
        return key
    group = groups.current()
    if group is None:
        return key
    salt = {"key": key, "rank": group.rank, "world_size": group.world}
    return digest_bytes(canonical_json(salt))


def run_in_group(
    seam: Any, store: Store, call: KeyedCall, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The call made as a rank of a job (a hit to commit, or :class:`Computed`), or None.

    None: not a rank of a job of two or more ranks, ``per_rank`` mode, or a call
    nested in a leader body: the caller goes on as in a process of its own.
    """
    if seam.mode == "per_rank" or groups.current() is None:
        return None
    if _runner is None:  # only when memostore's own __init__ did not run
        raise MemostoreError("memoised calls in a torch.distributed job need `import memostore`")
    return _runner(seam, store, call, args, kwargs)
