"""The lineage graph, kept readable for stores of thousands of evaluations.

A graph of every evaluation is only legible for a few hundred nodes. Beyond
that the page shows one of two bounded views:

- the functions: one node per function (how many evaluations it has), one
  edge per pair of functions whose results were passed from one to the other
  (how many times);
- the neighbourhood of one evaluation: its ancestors and descendants up to a
  depth, at most :data:`MAX_PER_LAYER` per layer (the newest kept, the rest
  counted), so the drawing's width stays bounded whatever the fan-out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .queries import BadRequest

if TYPE_CHECKING:
    from .queries import Catalog

# Up to this many evaluations, the whole graph is drawn.
FULL_GRAPH_MAX = 200
MAX_PER_LAYER = 24
MAX_DEPTH = 6


def _node(row: Mapping[str, Any], parents: Iterable[str]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "function": row["function"],
        "status": row["status"],
        "started": row["started"],
        "parents": list(parents),
    }


def lineage(catalog: Catalog, focus: str | None = None, depth: int = 2) -> dict[str, Any]:
    """The lineage graph as the page draws it.

    Args:
        catalog: the store's catalog.
        focus: an evaluation id (or a unique prefix of at least 6 digits) to
            draw the neighbourhood of; None for the whole store.
        depth: how many generations up and down the neighbourhood reaches.

    Returns:
        ``{"mode", "total", "nodes", "edges"}``. ``mode`` is ``full`` (every
        evaluation), ``functions`` (one node per function, ``count`` and
        ``newest`` per node, edges ``[parent function, child function, count]``)
        or ``focus`` (``focus`` is the id; each node has ``layer``, negative for
        ancestors; ``hidden`` counts per layer the nodes left out).
    """
    rows = catalog.runs()["rows"]
    by_id = {row["id"]: row for row in rows}
    parents = {row["id"]: [p for p in row["parents"] if p in by_id] for row in rows}
    if focus:
        return _neighbourhood(by_id, parents, _resolve(by_id, focus), depth)
    if len(rows) <= FULL_GRAPH_MAX:
        nodes = [_node(row, parents[row["id"]]) for row in rows]
        edges = [[p, node["id"]] for node in nodes for p in node["parents"]]
        return {"mode": "full", "total": len(rows), "nodes": nodes, "edges": edges}
    return _functions(rows, by_id, parents)


def _resolve(by_id: Mapping[str, Any], focus: str) -> str:
    if focus in by_id:
        return focus
    if len(focus) >= 6:
        found = [i for i in by_id if i.startswith(focus)]
        if len(found) == 1:
            return found[0]
    raise BadRequest(f"no single evaluation {focus[:16]}", 404)


def _functions(
    rows: list[dict[str, Any]], by_id: Mapping[str, Any], parents: Mapping[str, list[str]]
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    newest: dict[str, dict[str, Any]] = {}
    failed: Counter[str] = Counter()
    for row in rows:  # newest first: the first row of a function is its newest
        function = row["function"]
        counts[function] += 1
        newest.setdefault(function, row)
        failed[function] += row["status"] == "failed"
    links: Counter[tuple[str, str]] = Counter()
    for child, its_parents in parents.items():
        for parent in its_parents:
            links[(by_id[parent]["function"], by_id[child]["function"])] += 1
    nodes = [
        {
            "id": function,
            "function": function,
            "count": count,
            "failed": failed[function],
            "newest": newest[function]["id"],
            "parents": sorted({p for p, c in links if c == function and p != function}),
        }
        for function, count in counts.items()
    ]
    edges = [[p, c, n] for (p, c), n in sorted(links.items())]
    return {"mode": "functions", "total": len(rows), "nodes": nodes, "edges": edges}


def _neighbourhood(
    by_id: Mapping[str, Any], parents: Mapping[str, list[str]], focus: str, depth: int
) -> dict[str, Any]:
    depth = max(1, min(int(depth), MAX_DEPTH))
    children: defaultdict[str, list[str]] = defaultdict(list)
    for child, its_parents in parents.items():
        for parent in its_parents:
            children[parent].append(child)
    layer_of = {focus: 0}
    hidden: Counter[int] = Counter()
    for step, links in ((-1, parents), (1, children)):
        frontier = [focus]
        for generation in range(1, depth + 1):
            layer = step * generation
            found = {n for f in frontier for n in links.get(f, ()) if n not in layer_of}
            # The newest of a wide layer are kept: a reader looks for recent runs.
            ranked = sorted(found, key=lambda i: -(by_id[i].get("started") or 0.0))
            kept = ranked[:MAX_PER_LAYER]
            hidden[layer] = len(ranked) - len(kept)
            layer_of.update(dict.fromkeys(kept, layer))
            frontier = kept
    nodes = []
    for evaluation_id, layer in layer_of.items():
        node = _node(by_id[evaluation_id], [p for p in parents[evaluation_id] if p in layer_of])
        node["layer"] = layer
        nodes.append(node)
    edges = [[p, node["id"]] for node in nodes for p in node["parents"]]
    return {
        "mode": "focus",
        "focus": focus,
        "depth": depth,
        "total": len(by_id),
        "nodes": nodes,
        "edges": edges,
        "hidden": {str(k): v for k, v in sorted(hidden.items()) if v},
    }
