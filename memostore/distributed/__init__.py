"""Memoised calls inside torch.distributed jobs: one hit-or-miss decision for all ranks.

``calls`` makes a call as a rank of a job (``@memo(distributed=...)``'s three
modes), ``agreement`` compares the ranks' results of a miss and stores them
once or per rank, ``topology`` finds which ranks share a store, ``transfer``
sends a stored evaluation to node-local stores. ``docs/clusters.md`` says what each
mode guarantees. The process group itself is reached through
:mod:`memostore.records.group` (torch imported by the user, never here), and
the modes and per-rank keys are :mod:`memostore.call.ranks`'s: a call in a
process without a group never comes here.
"""

from ..call.ranks import MODES, Computed, check_mode, rank_key, use_group_runner
from ..records.group import alone
from .calls import RankFailed, RanksDisagree, run_call

# Memoised calls of a job's ranks go through run_call (``import memostore`` imports this).
use_group_runner(run_call)

__all__ = [
    "MODES",
    "Computed",
    "RankFailed",
    "RanksDisagree",
    "alone",
    "check_mode",
    "rank_key",
    "run_call",
]
