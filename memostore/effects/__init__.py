"""What a call does besides returning: argument effects and global RNG draws.

``arguments`` detects which arguments (and data globals) a body changed and
names where a result is an argument itself; ``replay`` updates a caller's
objects in place from their restored post-call state; ``rng`` records which
global random number generators a body drew from, and sets them on a hit.
"""
