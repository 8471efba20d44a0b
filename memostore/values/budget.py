"""One budget for every decode: what restoring may build, in proportion to what it read.

A stored value is data someone else may have written: a 151-byte document can
ask a constructor for a gigabyte (``bytearray(1_200_000_000)``,
``list(range(N))``), a shape can claim more than its blob holds, and a
document can reference another one a million times. The decoder
(``decoding.py``) charges everything it builds to one :class:`DecodeBudget`
before building it:

- each container node, by its number of elements (so repeated documents are
  paid for each time they are decoded);
- each call a node makes, by what the call may allocate for its arguments
  (``memostore/trust/sizes.py``), before the call runs;
- what codecs build (tensors, arrays, strings and bytes from blobs), through
  :meth:`~memostore.values.codec_api.DecodeContext.charge`.

The allowance grows with the distinct bytes the decode read (documents and
blobs): :data:`BASE_BYTES` plus :data:`PER_BYTE_READ` bytes per byte read.
Nesting is bounded by :data:`MAX_DEPTH`. Going over either raises
:class:`~memostore.errors.DecodeBudgetExceeded`, a :class:`DecodeError`: for a
memoised call, a miss whose warning says why.
"""

from __future__ import annotations

from ..errors import DecodeBudgetExceeded

# What any decode may build, whatever it read (small values, their Python objects).
BASE_BYTES = 64 << 20
# What each distinct byte read (documents and blobs) lets a decode build besides.
PER_BYTE_READ = 64
# Bytes charged for each container node besides its elements (the object itself).
NODE_BYTES = 64
# Nesting of container nodes (Python's default recursion limit: encoding stops there
# too); a value nested deeper is refused before it can exhaust the stack.
MAX_DEPTH = 1000


class DecodeBudget:
    """What one decode may still build; charged before each allocation.

    Attributes:
        allowance: bytes the decode may build, given what it read so far.
        spent: bytes charged so far.
        depth: container nodes being decoded, one inside the other.
        read_bytes: distinct bytes read so far.
    """

    __slots__ = ("_read", "allowance", "depth", "read_bytes", "spent")

    def __init__(self) -> None:
        self.allowance = BASE_BYTES
        self.spent = 0
        self.depth = 0
        self.read_bytes = 0
        self._read: set[str] = set()

    def read(self, object_id: str, nbytes: int) -> None:
        """Count the bytes of object *object_id* as read (once per decode, however often)."""
        if object_id not in self._read:
            self._read.add(object_id)
            self.read_bytes += nbytes
            self.allowance += PER_BYTE_READ * nbytes

    def charge(self, nbytes: int, what: str) -> None:
        """Charge *nbytes* for *what*; refuse if the decode would go over its allowance."""
        self.spent += nbytes
        if self.spent > self.allowance:
            raise DecodeBudgetExceeded(
                f"restoring it would build more than its decode budget allows ({what} "
                f"takes {nbytes:,} bytes; {self.spent:,} in all, over the {self.allowance:,} "
                f"allowed for the {self.read_bytes:,} bytes read): a stored value builds at "
                f"most {PER_BYTE_READ} bytes per byte stored, plus {BASE_BYTES >> 20} MiB"
            )

    def enter(self) -> None:
        """One container node deeper; refuse past :data:`MAX_DEPTH`."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise DecodeBudgetExceeded(
                f"it is nested more than {MAX_DEPTH} containers deep, deeper than a "
                "restored value may be"
            )
