"""Classes the user declares immutable: their digests are cached per object.

Most objects can change unseen, so their digest is recomputed on every use.
A user who knows better (a frozen configuration, a read-only data set) can
say so with :func:`register_immutable`; each instance is then hashed once per
process and its digest reused for as long as it lives. The promise is the
user's: mutating a registered object afterwards makes memostore key calls by
its old content.
"""

from __future__ import annotations

from typing import Any

from .codecs import Codec, register_codec


class _ImmutableCodec(Codec):
    """Encodes like any picklable object, in a document of its own, cacheably."""

    tag = "immutable"
    standalone = True

    def __init__(self, cls: type) -> None:
        self.types = (cls,)

    def encode(self, obj: Any, enc: Any) -> dict[str, Any]:
        return {"v": enc.node_by_reduce(obj)}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        return dec.node(node["v"])

    def fingerprint(self, obj: Any) -> Any:
        return ("immutable",)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "object"}


def register_immutable(cls: type) -> type:
    """Declare that instances of *cls* never change after creation.

    Usable as a class decorator. Their digests are then computed once per
    object and process, which matters for large arguments passed again and
    again.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_immutable needs a class, got {cls!r}")
    register_codec(_ImmutableCodec(cls))
    return cls
