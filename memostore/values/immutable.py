"""Classes the user declares immutable: their digests are cached per object.

Most objects can change unseen, so their digest is recomputed (or their
fingerprint re-taken) on every use. A user who knows better (a frozen
configuration, a read-only data set, a model used only for inference) can say
so with :func:`register_immutable`; each instance is then hashed once per
process and its digest reused for as long as it lives. The promise is the
user's: mutating a registered object afterwards (training a registered model,
say) makes memostore key calls by its old content.
"""

from __future__ import annotations

from typing import Any

from .codecs import Codec, register_codec, registry

_FROZEN = ("immutable",)


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
        return _FROZEN

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "object"}


class _FrozenCodec(Codec):
    """Another codec's encoding, with a fingerprint that never changes."""

    standalone = True

    def __init__(self, cls: type, inner: Codec) -> None:
        self.types = (cls,)
        self.inner = inner
        self.tag = inner.tag  # nodes stay exactly as the inner codec writes them

    def encode(self, obj: Any, enc: Any) -> dict[str, Any]:
        return self.inner.encode(obj, enc)

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        return self.inner.decode(node, dec)

    def fingerprint(self, obj: Any) -> Any:
        return _FROZEN

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return self.inner.summarize(node, reader)


def register_immutable(cls: type) -> type:
    """Declare that instances of *cls* never change after creation.

    Usable as a class decorator. Their digests are then computed once per
    object and process, which matters for large arguments passed again and
    again. A class that a codec already stores in a document of its own (an
    ``nn.Module`` subclass, a Dataset) keeps that codec's encoding; only its
    digest caching changes.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_immutable needs a class, got {cls!r}")
    inner = registry.for_type(cls)
    if inner is None:
        register_codec(_ImmutableCodec(cls))
    elif inner.standalone:
        while isinstance(inner, _FrozenCodec):
            inner = inner.inner
        registry.register_for_type(cls, _FrozenCodec(cls, inner))
    else:
        raise TypeError(
            f"{cls.__qualname__} is encoded inline by the {inner.tag!r} codec, whose "
            "digests are cached by content already; it cannot be registered immutable"
        )
    return cls
