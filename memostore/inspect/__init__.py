"""What reads the store for people: ``log``, ``show``, ``diff`` and revisions.

``inspection`` builds what ``log`` and ``show`` display (of recorded and of
running evaluations); ``comparison``, ``node_diff`` and ``result_diff`` build
``diff``; ``miss_check`` says whether a call with a stored evaluation's
arguments would hit today, reading today's source text (``source_check``)
without running anything. Revisions are resolved by :mod:`memostore.odb.revisions`.

Reads only: it imports the lower wings and never writes a ref or an object.
"""
