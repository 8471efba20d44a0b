"""The iteration order of dicts and sets, kept beside their canonical encoding.

A value's digest is the id of its canonical encoding, in which a dict's
items and a set's elements are sorted by their own encoding: two dicts equal
under ``==`` have one digest whatever their insertion order, and so do the
keys of two calls. A restored value must still be *the* value, in its order.
So an encoder that stores notes, for each unordered items list of a document
that it did not meet in canonical order, the permutation back to the order it
met: an *order annex*, ``{document id: [[path, order], ...]}``. ``path`` leads
from the document's ``node`` to the items list (object keys and list
indices); ``order[i]`` is the position in that list of the i-th item met.

The annex of everything one evaluation stored is one blob, named by the
evaluation (``orders``), outside every value's id: hashing never builds it,
and an equal value stored in another order keeps its digest and its
documents. Its content is checked when read (each order a permutation of its
list); a damaged annex fails the decode, which a hit treats as a miss.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..errors import MalformedObject
from ..odb.objects import canonical_json

Path = list[str | int]
Annex = list[list[Any]]  # [[path, order], ...] of one document


def order_of(keys: list[bytes]) -> tuple[list[int], list[int] | None]:
    """(canonical positions, order): the sort of *keys* (each item's encoding, as met)
    and the permutation that restores the order met (None when it is canonical)."""
    ranks = sorted(range(len(keys)), key=keys.__getitem__)
    if all(i == r for i, r in enumerate(ranks)):
        return ranks, None
    where = [0] * len(ranks)
    for position, original in enumerate(ranks):
        where[original] = position
    return ranks, where


def annex(root: Any, orders: dict[int, list[int]]) -> Annex:
    """The annex of a document whose node is *root*: *orders* by the id of an items list."""
    found: Annex = []
    for path, node in _walk(root, []):
        order = orders.get(id(node))
        if order is not None:
            found.append([list(path), order])
    return found


def _walk(node: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    stack: list[tuple[Any, Path]] = [(node, path)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            yield path, node
            stack.extend((child, [*path, i]) for i, child in enumerate(node))
        elif isinstance(node, dict):
            stack.extend((child, [*path, key]) for key, child in node.items())


def encode(orders: dict[str, Annex]) -> bytes:
    return canonical_json(dict(sorted(orders.items())))


def decode(data: bytes) -> dict[str, Annex]:
    try:
        orders = json.loads(data)
    except ValueError as exc:
        raise MalformedObject(f"an order annex is not JSON ({exc})") from exc
    if not isinstance(orders, dict) or not all(isinstance(v, list) for v in orders.values()):
        raise MalformedObject("an order annex is not a map of documents to orders")
    return orders


def resolve(root: Any, entries: Annex) -> dict[int, list[int]]:
    """The orders of a document's annex, by the id of the items list each applies to."""
    out: dict[int, list[int]] = {}
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], list):
            raise MalformedObject("an order annex entry is not [path, order]")
        path, order = entry
        node = root
        for step in path:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                raise MalformedObject("an order annex names a place its document lacks") from None
        if (
            not isinstance(node, list)
            or not isinstance(order, list)
            or not all(type(i) is int for i in order)
            or sorted(order) != list(range(len(node)))
        ):
            raise MalformedObject("an order annex holds an order that is no permutation")
        out[id(node)] = order
    return out


def reorder(items: list[Any], order: list[int] | None) -> list[Any]:
    """*items* (decoded in canonical order) in the order they were met."""
    if order is None:
        return items
    return [items[i] for i in order]
