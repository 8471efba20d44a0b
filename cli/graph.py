"""Lineage lanes for ``memostore log --graph``, drawn like ``git log --graph``.

Rows come newest first; a parent (an evaluation whose result was passed in)
is always older than its child, so it appears further down. Each lane waits
for one evaluation; ``*`` marks the row's own lane, ``|`` a lane passing by,
``\\`` a lane opened for a further parent and ``/`` lanes merging.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def graph_rows(records: Sequence[dict[str, Any]]) -> list[tuple[list[str], str]]:
    """For each record: (connector lines drawn before it, the prefix of its own line)."""
    listed = {r["id"] for r in records}
    lanes: list[str | None] = []
    out: list[tuple[list[str], str]] = []
    for record in records:
        rid = record["id"]
        before: list[str] = []
        mine = [i for i, lane in enumerate(lanes) if lane == rid]
        if mine:
            column = mine[0]
            if len(mine) > 1:
                # Several children waited for this one: merge their lanes into one.
                before.append(_draw(lanes, {i: "/" for i in mine[1:]}))
                for i in mine[1:]:
                    lanes[i] = None
        else:
            column = _free_lane(lanes)
            lanes[column] = rid
        _trim(lanes)
        row = _draw(lanes, {column: "*"})
        parents = [p for p in record.get("parents") or () if p in listed]
        opened: dict[int, str] = {}
        if parents:
            lanes[column] = parents[0]
            for parent in parents[1:]:
                if parent in lanes:
                    continue
                slot = _free_lane(lanes, after=column)
                lanes[slot] = parent
                opened[slot] = "\\"
        else:
            lanes[column] = None
        _trim(lanes)
        out.append((before, row))
        if opened:
            out.append(([_draw(lanes, opened)], ""))
    return _attach_connectors(out)


def _attach_connectors(rows: list[tuple[list[str], str]]) -> list[tuple[list[str], str]]:
    """Move connector-only entries onto the next record's "before" lines."""
    result: list[tuple[list[str], str]] = []
    pending: list[str] = []
    for before, row in rows:
        if not row:
            pending.extend(before)
            continue
        result.append((pending + before, row))
        pending = []
    return result  # trailing connectors lead nowhere: dropped


def _free_lane(lanes: list[str | None], after: int = -1) -> int:
    for i in range(after + 1, len(lanes)):
        if lanes[i] is None:
            return i
    lanes.append(None)
    return len(lanes) - 1


def _trim(lanes: list[str | None]) -> None:
    while lanes and lanes[-1] is None:
        lanes.pop()


def _draw(lanes: list[str | None], marks: dict[int, str]) -> str:
    width = max([len(lanes), *(i + 1 for i in marks)])
    cells = []
    for i in range(width):
        if i in marks:
            cells.append(marks[i])
        elif i < len(lanes) and lanes[i] is not None:
            cells.append("|")
        else:
            cells.append(" ")
    return " ".join(cells) + " "
