"""The relations a miss recorded (``identity.py``), applied while a hit is planned.

Where the miss bound a new object, a hit binds the restored one (and applies
the relations recorded below it); where it moved or shared an object from
before the call, the caller's own object (found along its path before the
call, see ``places.py``) stands there, updated in place; where it made a view,
the same view of the caller's tensor or array is made. ``replay.Planner``
asks :class:`Relations` at each place it plans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..values.codecs import CodecRegistry, registry
from .places import Path, child, children, describe, from_json, with_child
from .replay import MISSING, NotReplayable

if TYPE_CHECKING:
    from .replay import Planner

__all__ = ["Relations"]


class Relations:
    """The recorded relations of one evaluation, applied while a hit is planned.

    Args:
        records: what :func:`relations_of` recorded.
        resolve: the caller's object that stood at a path before the call (the
            root names an argument or a global as the call sees it now).
        sources: the restored post-call states by root name (the result under
            :data:`RESULT`).
    """

    def __init__(
        self,
        records: Iterable[Sequence[Any]],
        resolve: Callable[[Path], Any],
        sources: Mapping[str, Any],
        codecs: CodecRegistry = registry,
    ) -> None:
        self.records: dict[Path, tuple[Any, ...]] = {}
        self.below: set[Path] = set()  # every proper prefix of a recorded path
        for record in records:
            path = from_json(record[0])
            self.records[path] = tuple(record[1:])
            for n in range(1, len(path)):
                self.below.add(path[:n])
        self._resolve = resolve
        self.sources = sources
        self.codecs = codecs
        self._fresh: dict[Path, Any] = {}
        self._resolved: dict[Path, Any] = {}

    def resolve(self, path: Path) -> Any:
        found = self._resolved.get(path, MISSING)
        if found is MISSING:
            try:
                found = self._resolve(path)
            except NotReplayable as exc:
                raise NotReplayable(
                    f"{describe(path)}, which it took, is not there ({exc})"
                ) from None
            self._resolved[path] = found
        return found

    def source(self, path: Path) -> Any:
        obj = self.sources.get(path[0], MISSING)
        if obj is MISSING:
            raise NotReplayable(f"{describe(path)} was not stored")
        for step in path[1:]:
            obj = child(obj, step)
        return obj

    def apply(self, record: tuple[Any, ...], path: Path, source: Any, plan: Planner) -> Any:
        """The object a hit puts at *path*, where the miss left what *record* says."""
        kind = record[0]
        if kind == "new":
            return self.fresh(path, source, plan)
        if kind == "same":
            ref = from_json(record[1])
            return self.fresh(ref, self.source(ref), plan)
        if kind == "pre":
            obj = self.resolve(from_json(record[1]))
            planned = plan.in_place(obj, source, path)
            if planned is not obj and type(obj) not in (tuple, frozenset):
                raise NotReplayable(
                    f"{describe(from_json(record[1]))} would have to be replaced by another object"
                )
            return planned
        if kind == "view":
            return self.view(self.resolve(from_json(record[1])), record[2], record[3])
        raise NotReplayable(f"an unknown relation {kind!r} (written by a newer memostore?)")

    def view(self, base: Any, base_layout: Any, layout: Any) -> Any:
        codec = self.codecs.for_type(type(base))
        made = None if codec is None else codec.view(base, base_layout, layout)
        if made is None:
            raise NotReplayable(
                f"a view of a {type(base).__qualname__} laid out as the stored call's was cannot "
                "be made of the caller's"
            )
        return made

    def fresh(self, path: Path, source: Any, plan: Planner) -> Any:
        """*source* (a restored object), bound whole at *path*, its own relations applied."""
        found = self._fresh.get(path, MISSING)
        if found is not MISSING:
            return found
        self._fresh[path] = source  # a cycle back to it finds it
        out = self._substitute(path, source, plan) if path in self.below else source
        self._fresh[path] = out
        return out

    def _substitute(self, path: Path, obj: Any, plan: Planner) -> Any:
        for step, value in list(children(obj, self.codecs)):
            at = (*path, step)
            record = self.records.get(at)
            if record is not None:
                new = self.apply(record, at, value, plan)
            elif at in self.below:
                new = self._substitute(at, value, plan)
            else:
                continue
            if new is not value:
                obj = with_child(obj, step, new)
        return obj
