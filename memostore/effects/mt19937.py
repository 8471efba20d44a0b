"""How a Mersenne Twister state was seeded, read from the state alone.

Python's ``random`` and numpy's legacy global RNG are MT19937 generators. A
state that nothing has drawn from since it was seeded still shows how it was
seeded:

* ``init_genrand(s)`` (numpy's ``seed(int)``) fills the key by a fixed
  recurrence from the 32-bit seed: the recurrence holds across the key;
* ``init_by_array(key)`` (Python's ``seed(x)`` for any value, numpy's
  ``seed(array)``, and both libraries' seeding from the operating system's
  entropy) mixes the key words into a fixed start state and ends with the
  first word set to ``0x80000000``. The mixing can be undone: it gives back
  ``key[t mod n] + (t mod n)`` for most positions ``t``, periodic with the
  key's length ``n``. A seed the program chose is a few words long; entropy
  fills all 624;
* numpy draws its import-time (and ``seed()``) entropy straight into the key,
  first word ``0x80000000``, position 623.

Once the generator has drawn, the twisted state keeps none of this: the
answer is then "cannot tell".
"""

from __future__ import annotations

from collections.abc import Sequence

N = 624
_MASK = 0xFFFFFFFF
_ARRAY_FIRST = 0x80000000
# Periods up to this are recognised as a key the program chose: the longest seed
# that is then missed is 601 words (a 19,200-bit integer, or a 2.3 kB string).
_LONGEST_KEY = 600

_start: list[int] = []


def _init_genrand(seed: int) -> list[int]:
    mt = [seed & _MASK]
    for i in range(1, N):
        prev = mt[i - 1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK)
    return mt


def is_genrand(words: Sequence[int]) -> bool:
    """Whether *words* are the key ``init_genrand`` makes from its first word."""
    prev = words[0]
    for i in range(1, N):
        if words[i] != (1812433253 * (prev ^ (prev >> 30)) + i) & _MASK:
            return False
        prev = words[i]
    return True


def mixed_key(words: Sequence[int]) -> list[int]:
    """Undo ``init_by_array`` on a state it made: ``key[t mod n] + (t mod n)`` for t = 2..622.

    Only meaningful for a state straight out of ``init_by_array`` (nothing drawn
    since); on any other state the values are noise.
    """
    if not _start:
        _start.extend(_init_genrand(19650218))
    start = _start
    a = list(words)
    # The second pass ran i = 2..623, wrapped (mt[0] = mt[623]) and ran i = 1 last;
    # each step is invertible given the word before it, as it was at that time.
    last = a[N - 1]
    a[1] = ((a[1] + 1) & _MASK) ^ (((last ^ (last >> 30)) * 1566083941) & _MASK)
    for i in range(N - 1, 1, -1):
        prev = a[i - 1]  # still the final word for i >= 3; already undone for i == 2
        a[i] = ((a[i] + i) & _MASK) ^ (((prev ^ (prev >> 30)) * 1566083941) & _MASK)
    # The first pass set mt[t + 1] = (start[t + 1] ^ f(mt[t])) + key[j] + j, j = t mod n.
    out = []
    for t in range(2, N - 1):
        prev = a[t]
        mixed = start[t + 1] ^ (((prev ^ (prev >> 30)) * 1664525) & _MASK)
        out.append((a[t + 1] - mixed) & _MASK)
    return out


def _is_periodic(values: list[int]) -> bool:
    """Whether *values* repeat with some period of at most ``_LONGEST_KEY``."""
    first = values[0]
    for period in range(1, min(_LONGEST_KEY, len(values) - 1) + 1):
        if values[period] == first and values[period:] == values[: len(values) - period]:
            return True
    return False


def seeded_with_value(words: Sequence[int], pos: int) -> bool | None:
    """How a MT19937 state was last seeded, if nothing has drawn from it since.

    Args:
        words: the 624 key words.
        pos: the position of the next word to draw (624: all used, a twist comes next).

    Returns:
        True: seeded with a value the program chose; False: seeded from the
        operating system's entropy; None: the state cannot tell (it has been
        drawn from since, or was set as a whole).
    """
    if len(words) != N:
        return None
    if words[0] == _ARRAY_FIRST and pos == N - 1:
        return False  # numpy's entropy, drawn straight into the key
    if pos != N:
        return None
    if words[0] == _ARRAY_FIRST:
        return _is_periodic(mixed_key(words))
    if is_genrand(words):
        return True
    return None
