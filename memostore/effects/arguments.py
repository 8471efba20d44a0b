"""Argument effects: what a body changed in the objects it was given, kept and replayed.

``train(model, opt, loader, epoch)`` as pytorch/examples writes it trains
``model`` and ``opt`` in place and returns None. Its result alone says
nothing; what matters is the state it leaves in its arguments. On a miss the
arguments (and the data globals the body reads, which are keyed like
arguments) are hashed again after the body; each one whose digest changed
is stored in that post-call state. A hit restores those states and updates
the caller's objects in place (``replay.py``), so the program goes on exactly
as after the miss.

Globals are watched the same way, and one more effect is possible for them:
the body may bind the name to another object (``global best; best = ...``),
which a hit repeats with the restored object.

Identity between the result and the arguments is kept too (``identity.py``):
a result that *is* an argument (``return model``) or a part of one gives the
caller's own objects back on a hit, as the miss did; where the body bound a
new object into an argument, a hit binds a new restored one there. (Evaluations
stored before identity was recorded name only results that are arguments:
:func:`alias_paths`.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..odb.objects import canonical_json
from ..values.encoding import Encoder, HashSink
from .places import navigate
from .replay import MISSING, NotReplayable, Planner

__all__ = [
    "Watched",
    "alias_paths",
    "changed_names",
    "plan_replay",
    "resolver",
    "substitute_aliases",
]


@dataclass
class Watched:
    """What a call hands its body: arguments by name, data globals by symbol.

    Attributes:
        items: (name, value) pairs in key order: the arguments, then the data
            globals present at the call.
        globals: symbol -> (namespace, name) of each data global, present or not.
    """

    items: list[tuple[str, Any]]
    globals: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def current(self) -> list[tuple[str, Any]]:
        """The items as they are now (a global may have been bound meanwhile)."""
        out = [(name, value) for name, value in self.items if name not in self.globals]
        for symbol, (namespace, name) in self.globals.items():
            value = namespace.get(name, MISSING)
            if value is not MISSING:
                out.append((symbol, value))
        return out

    def value_of(self, name: str) -> Any:
        if name in self.globals:
            namespace, key = self.globals[name]
            return namespace.get(key, MISSING)
        for item_name, value in self.items:
            if item_name == name:
                return value
        return MISSING


def _item_nodes(doc_node: Any) -> dict[str, bytes]:
    """name -> canonical bytes of its node, from an arguments document's node."""
    return {name: canonical_json(node) for name, node in doc_node["items"]}


def changed_names(
    watched: Watched, before_id: str, before_node: Any
) -> tuple[list[str], list[str]]:
    """The watched items whose value changed in the body: (mutated in place, rebound).

    Hashes the items again (cheap for those the hash cache proves unchanged);
    the arguments document hashed for the key is the state before.
    """
    now = watched.current()
    sink = HashSink()
    after_id = Encoder(sink).encode_mapping(now)
    if after_id == before_id:
        return [], []
    before = _item_nodes(before_node)
    after = _item_nodes(sink.docs[after_id].body["node"])
    before_values = dict(watched.items)
    mutated: list[str] = []
    rebound: list[str] = []
    for name, value in now:
        if before.get(name) == after[name]:
            continue
        old = before_values.get(name, MISSING)
        if name in watched.globals and old is not value:
            rebound.append(name)
        else:
            mutated.append(name)
    return mutated, rebound


def plan_replay(
    planner: Planner,
    watched: Watched,
    sources: Mapping[str, Any],
    rebound: Iterable[str],
) -> list[tuple[Any, str, Any]]:
    """Plan the effects *sources* (restored post-call states by name) on *watched*.

    Returns the global bindings to make at commit, as (namespace, name, value).
    Raises NotReplayable, before anything is changed, when an effect cannot be
    replayed (the name says which argument).
    """
    rebound = set(rebound)
    bindings: list[tuple[Any, str, Any]] = []
    for name, source in sources.items():
        if name in rebound:
            namespace, key = watched.globals.get(name, (None, ""))
            if namespace is None:
                raise NotReplayable(f"{name} is not a global this function reads")
            if not hasattr(namespace, "__setitem__"):
                raise NotReplayable(f"{name} cannot be bound again from outside its function")
            try:
                bindings.append((namespace, key, planner.root(name, MISSING, source)))
            except NotReplayable as exc:
                raise NotReplayable(f"global {name}: {exc}") from None
            continue
        target = watched.value_of(name)
        what = f"global {name}" if name in watched.globals else f"argument {name!r}"
        if target is MISSING:
            raise NotReplayable(f"{what} is not bound")
        try:
            if planner.root(name, target, source) is not target:
                raise NotReplayable(
                    f"it would have to be replaced by another object "
                    f"({type(target).__qualname__} -> {type(source).__qualname__})"
                )
        except NotReplayable as exc:
            raise NotReplayable(f"{what}: {exc}") from None
    return bindings


def resolver(watched: Watched) -> Callable[[tuple[Any, ...]], Any]:
    """How a hit finds the caller's object that stood at a path before the call."""

    def resolve(path: tuple[Any, ...]) -> Any:
        root = watched.value_of(path[0])
        if root is MISSING:
            raise NotReplayable(f"{path[0]} is not bound")
        return navigate(root, path)

    return resolve


_NOT_TRACKED = (type(None), bool, int, float, complex, str, bytes)


def alias_paths(result: Any, watched: Sequence[tuple[str, Any]]) -> dict[str, str]:
    """Where *result* holds watched objects themselves: path -> watched name.

    Paths: ``""`` for the result itself, ``"i"`` for item *i* of a tuple or
    list, ``"k:KEY"`` for the entry of a dict with a str key.
    """
    by_id = {id(v): name for name, v in watched if not isinstance(v, _NOT_TRACKED)}
    if not by_id:
        return {}
    found = by_id.get(id(result))
    if found is not None:
        return {"": found}
    out: dict[str, str] = {}
    if type(result) in (tuple, list):
        for i, item in enumerate(result):
            name = by_id.get(id(item))
            if name is not None:
                out[str(i)] = name
    elif type(result) is dict:
        for key, item in result.items():
            name = by_id.get(id(item))
            if name is not None and type(key) is str:
                out[f"k:{key}"] = name
    return out


def substitute_aliases(result: Any, aliases: Mapping[str, str], watched: Watched) -> Any:
    """*result* with the caller's own objects where the miss returned them."""
    if not aliases:
        return result
    values = {name: watched.value_of(name) for name in set(aliases.values())}
    if any(v is MISSING for v in values.values()):
        return result
    if "" in aliases:
        return values[aliases[""]]
    if type(result) in (tuple, list):
        items = list(result)
        for path, name in aliases.items():
            if path.isdigit() and int(path) < len(items):
                items[int(path)] = values[name]
        return type(result)(items)
    if type(result) is dict:
        for path, name in aliases.items():
            if path.startswith("k:") and path[2:] in result:
                result[path[2:]] = values[name]
    return result


__all__ += ["MISSING", "NotReplayable", "Planner"]
