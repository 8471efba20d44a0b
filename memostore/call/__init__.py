"""The ``@memo`` decorator and the life of one memoised call.

``memoize`` is the decorator and the call flow; ``keys`` binds arguments;
``stores`` finds the store a call uses; ``rng_conditions`` finds the stored
evaluation whose global RNG condition holds (by lineage, or exactly);
``hits`` prepares and commits a hit; ``recording`` stores a miss (its record
is :mod:`memostore.records`'); ``single_flight`` makes a miss wait for a live
caller computing the same call; ``verbose`` says hit or miss, and why;
``ranks`` holds the ``distributed=`` modes and hands a call made by a rank
of a torch.distributed job to the runner :mod:`memostore.distributed`
registers. Argument effects and RNG draws live in :mod:`memostore.effects`.

The wing is named ``call``, not ``memo``: ``memostore.memo`` is the public
decorator, and a subpackage of that name would shadow it as an attribute
(``import memostore.memo.keys as keys`` fails once ``memostore`` is imported).

Imports every wing below it (``docs/architecture.md``): odb, transport, code,
trust, values, effects, records, metrics, remote, lifecycle and inspect
(why a call missed); never distributed or ui.
"""
