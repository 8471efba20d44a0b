"""Values to content-addressed objects and back.

``encoding`` turns a value into objects (and so hashes it: ``hashing``),
``decoding`` restores it, and ``codecs`` is the registry through which types
outside the core (torch's, numpy's, Hugging Face datasets', files and
snapshots) plug into both. ``hashcache`` and ``immutable`` keep digests per
object only where the object cannot change unseen; ``code_refs`` stores
functions and classes inside values as digest-pinned symbols; ``summaries``
describe stored values without reading their bulk data.

Imports the lower wings (:mod:`memostore.odb`, :mod:`memostore.code`,
:mod:`memostore.trust`'s gate); never memo, inspect, metrics, remote,
lifecycle, distributed or ui.
"""
