"""What a call does besides returning: argument effects and global RNG draws.

``arguments`` detects which arguments (and data globals) a body changed and
names where a result is an argument itself; ``replay`` updates a caller's
objects in place from their restored post-call state. For the global random
number generators: ``rng`` says what each one is (its state, its seeding
functions), ``seeding`` whether the program has seeded it (its lineage),
``draws`` which ones a body drew from, and sets them again on a hit;
``mt19937`` reads from a Mersenne Twister's state how it was seeded.
"""
