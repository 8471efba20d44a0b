"""What a call does besides returning: argument effects, identities, RNG draws, process reads.

``arguments`` detects which arguments (and data globals) a body changed;
``identity`` records which objects the body bound anew, moved, shared or
viewed (``places`` names where an object stands) and ``relations`` applies
that on a hit; ``replay`` updates a caller's objects in place from their
restored post-call state; ``process`` keys the process settings that change
results and records the environment variables a body reads. For the global
random number generators: ``rng`` says what each one is (its state, its
seeding functions), ``seeding`` whether the program has seeded it (its
lineage), ``draws`` which ones a body drew from, and sets them again on a
hit; ``mt19937`` reads from a Mersenne Twister's state how it was seeded.
"""
