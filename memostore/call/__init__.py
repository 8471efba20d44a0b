"""The ``@memo`` decorator and the life of one memoised call.

``memoize`` is the decorator and the call flow; ``keys`` binds arguments and
derives the call key; ``rng_conditions`` finds the stored evaluation whose
global RNG condition holds (by lineage, or exactly); ``hits`` prepares and
commits a hit; ``recording`` stores a miss (``evaluation`` is its record,
``provenance`` where it ran);
``context`` is the evaluation a piece of code runs inside, for logging and
lineage; ``single_flight`` makes a miss wait for a live caller computing the
same call; ``verbose`` says hit or miss, and why. Argument effects and RNG
draws live beside this wing, in :mod:`memostore.effects`.

The wing is named ``call``, not ``memo``: ``memostore.memo`` is the public
decorator, and a subpackage of that name would shadow it as an attribute
(``import memostore.memo.keys as keys`` fails once ``memostore`` is imported).

Imports values, code, effects, odb, trust and remote (auto-fetch, remote
leases); torch.distributed support reaches in through :mod:`memostore.distributed`
only inside a process group.
"""
