"""Memoised calls inside torch.distributed jobs: one hit-or-miss decision for all ranks.

``calls`` makes a call as a rank of a job (``@memo(distributed=...)``'s three
modes), ``agreement`` compares the ranks' results of a miss and stores them
once or per rank, ``group`` reaches the process group (torch imported by the user, never
here), ``topology`` finds which ranks share a store, ``transfer`` sends a
stored evaluation to node-local stores. ``docs/clusters.md`` says what each
mode guarantees.
"""

from .calls import MODES, Computed, RankFailed, RanksDisagree, check_mode, rank_key, run_call
from .group import alone

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
