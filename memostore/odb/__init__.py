"""The object database and refs: where a store's bytes live, and nothing else.

``objects`` defines values that compute their own BLAKE3 id (docs, trees,
blobs); ``packs`` puts the small blobs of one value in a single file;
``object_base`` and ``object_store`` are the disk and memory databases that
write them once and re-check them on read (``verified`` records what a stat
has proven); ``refs`` are named pointers updated by compare-and-swap under
``lockfile``; ``signatures`` keeps the signature lines of evaluations;
``store`` joins objects, refs and signatures in one directory. Around them:
the evaluation ``index`` (a cache for listings), ``tags`` (refs that pin
evaluations) and ``revisions`` (what a user types to name an evaluation: an id
prefix, a function name, ``NAME~N``, a tag, resolved through the refs as ``git
rev-parse`` does), local ``leases`` (who is computing a call), ``checkouts``
(stored files laid out as plain files), ``sweep`` of what killed writers
leave, ``fsck``, and the file-system helpers that never follow a planted link
(``inside``, ``beneath``, ``fsutil``, ``filecopy``, ``jsonlines``).

This wing is the bottom layer: it imports :mod:`memostore.errors` and nothing
else of memostore.
"""
