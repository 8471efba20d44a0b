"""What a call does besides returning: argument effects, identities, RNG draws, process reads.

``arguments`` detects which arguments (and data globals) a body changed;
``identity`` records which objects the body bound anew, moved, shared or
viewed (``places`` names where an object stands) and ``relations`` applies
that on a hit; ``replay`` updates a caller's objects in
place from their restored post-call state; ``rng`` records which global random
number generators a body drew from, and sets them on a hit; ``process`` keys
the process settings that change results and records the environment
variables a body reads.
"""
