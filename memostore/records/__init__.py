"""Evaluation records, and the evaluation a piece of code runs inside.

``evaluation`` builds and reads the record of one evaluation (what ran, on
which arguments and code, with what outcome; the refs that name it), with
``provenance`` (where and how it ran). ``context`` is the evaluation in
progress, which logging and lineage attach to; ``standalone`` is the standalone
*run* evaluation of a script that logs outside any memoised call; ``names``
are what listings, charts and exports call an evaluation.

Below the wings that make evaluations (:mod:`memostore.call`) and those that
log into them (:mod:`memostore.metrics`): imports odb and values only.
"""
