"""What a codec sees of the encoder, the decoder and the replay planner.

A codec (``codecs.py``) is handed the :class:`~.encoding.Encoder` that is
encoding a value, the :class:`~.decoding.Decoder` restoring one, or the
planner of an in-place replay (``memostore/effects/replay.py``). These
protocols are the part of each a codec may use: they name the contract
without importing the classes, which import the codec registry themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..odb.object_store import BaseObjectStore
    from ..trust.gate import TrustContext

# Bytes of a blob, produced lazily and streamed to the store.
Producer = Callable[[], Iterable[Any]]


class EncodeContext(Protocol):
    """The encoder, as a codec's ``encode`` uses it."""

    payloads: dict[str, str]  # code digest -> blob id of code stored by value
    sink: Any  # where objects go (a store, or a hashing sink that keeps nothing)

    @property
    def scratch(self) -> dict[Any, Any]:
        """Scratch space local to the document being built."""

    def node(self, obj: Any) -> Any:
        """The inline node of *obj* within the current document."""

    def node_by_reduce(self, obj: Any) -> dict[str, Any]:
        """The node of *obj* through the pickle reduce protocol, bypassing its codec."""

    def ref(self, obj: Any) -> dict[str, Any]:
        """A reference to *obj* encoded as its own value document."""

    def blob(
        self,
        produce: Producer,
        size: int,
        known_id: str = "",
        packable: bool = False,
        hint: str = "",
    ) -> str:
        """Store bytes as a blob and link it from the current document; its id."""

    def cached_blob(
        self,
        obj: Any,
        fingerprint: Hashable | None,
        produce: Producer,
        size: int,
        packable: bool = False,
    ) -> str:
        """Like :meth:`blob`, reusing the digest cached for *obj* while its fingerprint holds."""

    def code(self, obj: Any) -> dict[str, Any]:
        """A digest-pinned reference to a function or class."""


class DecodeContext(Protocol):
    """The decoder, as a codec's ``decode`` uses it."""

    objects: BaseObjectStore
    payloads: dict[str, str]
    session: dict[Any, Any]  # shared by every document of one decode

    @property
    def trust(self) -> TrustContext:
        """What the trust gate knows of the store being read."""

    @property
    def scratch(self) -> dict[Any, Any]:
        """Scratch space local to the document being decoded."""

    def node(self, node: Any) -> Any:
        """The value of an inline node."""

    def code(self, node: dict[str, Any], instantiate: bool = True) -> Any:
        """The function or class a code node names, if the gate allows it."""

    def callee(self, node: Any) -> Any:
        """What a node may call: a code node the gate lets be called."""

    def check_inert(self, values: Any, what: str) -> None:
        """Refuse *values* holding an object made from its state alone."""

    def after(self, fn: Callable[[], None]) -> None:
        """Run *fn* once the whole value is decoded."""

    def blob_bytes(self, blob_id: str) -> bytes:
        """A blob's bytes, checked against its id (charged to the decode budget)."""

    def charge(self, nbytes: int, what: str, blob: str = "", blob_size: int = 0) -> None:
        """Charge what the codec is about to build to the one decode budget, first.

        Every allocation a codec makes from a node's fields (a shape, a count)
        is charged here before it is made; *blob* (of *blob_size* bytes) counts
        as read. Raises DecodeBudgetExceeded (a miss) when over budget.
        """

    def call(
        self, fn: Any, args: list[Any], kwargs: dict[str, Any] | None = None, new: bool = False
    ) -> Any:
        """Call what the gate allowed with decoded arguments, charged to the budget first."""

    def blob_file(self, blob_id: str) -> str | None:
        """Where a blob's file is, unchecked."""


class ReplayPlan(Protocol):
    """The planner of an in-place replay, as a codec's ``assign`` uses it."""

    def op(self, fn: Callable[[], None]) -> None:
        """Plan one change, made when the hit commits (after those planned before)."""

    def update(self, target: Any, source: Any, what: str) -> None:
        """Plan making *target* equal to *source* without replacing it."""

    def value(self, target: Any, source: Any) -> Any:
        """The object that should stand where *target* is: *target* updated, or *source*."""

    def dict_items(self, target: dict[Any, Any], source: dict[Any, Any]) -> None:
        """Plan making the dict *target* hold *source*'s items, in its order."""

    def namespace(self, attrs: dict[str, Any], state: dict[str, Any]) -> None:
        """Plan making the attribute dict *attrs* hold *state*, entry by entry."""
