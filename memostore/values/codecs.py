"""The codec registry: how types outside the core are hashed, stored and restored.

memostore's core knows plain Python values, numpy arrays and anything that
pickles. Other packages (``torch_codecs`` for PyTorch) teach it more types by
registering a :class:`Codec`. Packages are found through the ``memostore.values.codecs``
entry-point group, loaded the first time a type or tag is not known, so
importing memostore never imports torch.

A codec turns an object into a JSON *node* (a dict) and back. Its node may hold
other nodes (``enc.node(x)``), references to separate value documents
(``enc.ref(x)``: cacheable, shared between results) and blobs
(``enc.blob(...)``). The digest of a value is the id of its encoding, so the
encoding must be canonical: equal values, equal nodes, in any process.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import warn

if TYPE_CHECKING:
    from .codec_api import DecodeContext, EncodeContext, ReplayPlan

ENTRY_POINT_GROUP = "memostore.codecs"


class Codec:
    """Base class for codecs.

    Attributes:
        tag: the node tag, namespaced with a dot (``"torch.tensor"``); core tags
            have no dot.
        types: classes handled, subclasses included (resolved along the MRO).
        type_names: the same by ``"module.QualName"``, so a codec can register
            without importing the library that defines the class.
        standalone: encode values of this codec into their own document, which
            parents reference by id (large values, cacheable digests).
    """

    tag: ClassVar[str] = ""
    types: ClassVar[tuple[type, ...]] = ()
    type_names: ClassVar[tuple[str, ...]] = ()
    standalone: ClassVar[bool] = False
    # Replay treats values of this codec as one piece (a tensor, a generator): the
    # objects they hold are not followed when the identity of objects is compared
    # before and after a call (``effects/identity.py``).
    identity_leaf: ClassVar[bool] = False
    # Values that stand for a process-wide object found by name (a logger): a
    # replay binds the restored one, never changes the caller's in place, and
    # their identity is their name.
    by_reference: ClassVar[bool] = False

    def encode(self, obj: Any, enc: EncodeContext) -> dict[str, Any]:
        """Return the node's fields (the encoder adds ``"$": tag``)."""
        raise NotImplementedError

    def decode(self, node: dict[str, Any], dec: DecodeContext) -> Any:
        """Rebuild a fresh object from a node this codec encoded."""
        raise NotImplementedError

    def fingerprint(self, obj: Any) -> Hashable | None:
        """A cheap value that changes whenever *obj*'s content may have changed.

        Return None (the default) when no such guarantee exists: the object is
        then re-hashed each time. The hash cache reuses a digest only while the
        object is alive and its fingerprint is unchanged.
        """
        return None

    def fingerprint_holds(self, obj: Any, fingerprint: Hashable) -> bool:
        """Whether *fingerprint*, taken of *obj* earlier, still describes it.

        The default takes a new fingerprint and compares. A codec with a cheaper
        proof (module trees: ``torch_codecs/module_guards.py``) overrides it; it
        must never answer True for an object whose new fingerprint would differ.
        """
        return self.fingerprint(obj) == fingerprint

    def stored_attributes(self, obj: Any) -> dict[str, Any] | None:
        """The attributes of *obj* as its encoding stores them (None: its ``__dict__``).

        The identity walk (``effects/places.py``) follows these, so that it never
        records a path through what is not stored (a LightningModule's ``_trainer``,
        which its ``__getstate__`` drops).
        """
        return None

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        """A JSON summary for ``memostore show`` (no bulk data read)."""
        return {"type": self.tag}

    def unchanged(self, target: Any, source: Any) -> bool:
        """Whether *target* provably encodes as *source* does (so a replay can skip it).

        The default, for standalone codecs: both have a digest in the hash cache
        that their fingerprints still prove, and the digests are equal. Never
        True on a guess: False only costs a replay of equal content.
        """
        if not self.standalone:
            return False
        from .hashcache import digest_cache

        def known(obj: Any) -> str | None:
            return digest_cache.get_if(obj, lambda old: self.fingerprint_holds(obj, old))

        digest = known(target)
        return digest is not None and digest == known(source)

    def holds_shards(self, obj: Any) -> bool:
        """Whether *obj* holds this rank's shard of something (its value differs by rank).

        A hint for speed only, never for correctness: the ranks of a job then
        store their results at once instead of comparing them first
        (``distributed/agreement.py``). The default says no.
        """
        return False

    def merge_ranks(self, nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
        """One node standing for *nodes*, the same value as each rank of a job stored it.

        Called when the per-rank results of a job (``rank_results.py``) are
        restored in a job of another size, for nodes of this codec that differ
        by rank (``nodes[r]`` is rank r's). Return None (the default) when they
        cannot be put together: the stored result is then not used. A codec of
        sharded values (DTensors) returns a node its :meth:`decode` reshards.
        """
        return None

    def memory(self, obj: Any) -> Memory | None:
        """Where *obj*'s elements lie, for values that can view another's memory (tensors).

        None (the default) for values that never share memory with another.
        """
        return None

    def view(self, base: Any, base_layout: Any, layout: Any) -> Any:
        """A new view of *base*'s memory laid out as *layout* says (see :class:`Memory`).

        *base_layout* is the layout *base* had when the relation was recorded;
        return None when *base* is laid out otherwise now (the view cannot be made).
        """
        return None

    def same_type(self, target: Any, source: Any) -> bool:
        """Whether *target* may be updated from *source* although their types differ.

        False (the default): a replay binds *source* instead. True where a class
        is made per object at run time (a parametrized module's).
        """
        return False

    def assign(self, target: Any, source: Any, plan: ReplayPlan) -> bool:
        """Plan making *target* equal to *source* in place (``effects/replay.py``).

        Return False (the default) to let the planner update the object's
        attributes as pickling sees them; raise ``NotReplayable`` when the
        target cannot be updated in place.
        """
        return False


@dataclass(frozen=True)
class Memory:
    """The memory a value's elements lie in: which allocation, and which bytes of it.

    Attributes:
        space: identifies the allocation (a tensor's storage on its device);
            values whose spaces are equal share memory.
        start, end: the byte range the value spans, within the allocation.
        layout: a JSON description of the value's layout (dtype, shape, strides,
            offset), which :meth:`Codec.view` understands.
    """

    space: Hashable
    start: int
    end: int
    layout: Any


class CodecRegistry:
    """Codecs by tag and by type; entry points loaded lazily, once."""

    def __init__(self) -> None:
        self._by_tag: dict[str, Codec] = {}
        self._by_type: dict[type, Codec] = {}
        self._by_type_name: dict[str, Codec] = {}
        self._resolved: dict[type, Codec | None] = {}
        self._entry_points_loaded = False
        self._lock = threading.RLock()

    def register(self, codec: Codec) -> None:
        """Add *codec*; a later registration for the same tag or type wins."""
        if not codec.tag:
            raise ValueError("a codec needs a tag")
        with self._lock:
            self._by_tag[codec.tag] = codec
            for t in codec.types:
                self._by_type[t] = codec
            for name in codec.type_names:
                self._by_type_name[name] = codec
            self._resolved.clear()

    def register_for_type(self, cls: type, codec: Codec) -> None:
        """Use *codec* for *cls* (and its subclasses) without touching the tag table."""
        with self._lock:
            self._by_type[cls] = codec
            self._resolved.clear()

    def for_type(self, cls: type) -> Codec | None:
        """The codec for *cls* (nearest along its MRO), or None."""
        try:
            return self._resolved[cls]
        except KeyError:
            pass
        codec = self._search(cls)
        # Codec packages add codecs for their own types, never for builtins; looking
        # there for a plain dict would import torch on the first hit of any result.
        if codec is None and cls.__module__ != "builtins" and self._load_entry_points():
            codec = self._search(cls)
        self._resolved[cls] = codec
        return codec

    def for_tag(self, tag: str, load: bool = True) -> Codec | None:
        """The codec that wrote nodes tagged *tag*; with ``load=False`` only codecs
        registered so far are considered (no codec package is imported)."""
        codec = self._by_tag.get(tag)
        if codec is None and load and self._load_entry_points():
            codec = self._by_tag.get(tag)
        return codec

    def _search(self, cls: type) -> Codec | None:
        for klass in getattr(cls, "__mro__", (cls,)):
            codec = self._by_type.get(klass)
            if codec is not None:
                return codec
            codec = self._by_type_name.get(f"{klass.__module__}.{klass.__qualname__}")
            if codec is not None:
                return codec
        return None

    def load_entry_points(self) -> None:
        """Load every registered codec package now, if not done yet (idempotent)."""
        if not self._entry_points_loaded:
            self._load_entry_points()

    def _load_entry_points(self) -> bool:
        """Load every registered codec package once; True if anything new came."""
        with self._lock:
            if self._entry_points_loaded:
                return False
            self._entry_points_loaded = True
            from importlib import metadata

            before = len(self._by_tag)
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                try:
                    ep.load()(self)
                except ImportError:
                    continue  # the package's own dependency (e.g. torch) is missing
                except Exception as exc:
                    warn(
                        f"codec package {ep.value} failed to register ({exc}); "
                        "its types are stored by pickling instead"
                    )
            self._resolved.clear()
            return len(self._by_tag) != before


registry = CodecRegistry()


def register_codec(codec: Codec) -> Codec:
    """Register a codec in the process-wide registry and return it."""
    registry.register(codec)
    return codec
