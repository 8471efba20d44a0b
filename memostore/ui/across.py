"""What the runs page draws of several runs at once, beyond scalar charts.

One tag's points across the selected runs (images, histograms, text, PR
curves side by side), the values ``add_hparams`` recorded per run (the HParams
views), and a logged graph as a module tree (:mod:`.graphdef`). Everything is
read from the logs, as the evaluation page reads it (:mod:`.pages`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .graphdef import module_tree, parse_graph
from .pages import logged_hparams, tag_events, tag_points
from .queries import BadRequest

if TYPE_CHECKING:
    from .queries import Catalog


def tag_across(catalog: Catalog, ids: list[str], tag: str) -> dict[str, Any]:
    """The points of one non-scalar tag in each of *ids* that logged it.

    Returns:
        ``{"tag", "runs": [{"id", "kind", "count", "events"}]}``, in the order of
        *ids*; each run's points as :func:`.pages.tag_events` gives them (the
        last 500). A run that did not log the tag is left out.
    """
    out = []
    for identifier in ids:
        try:
            found = tag_events(catalog, identifier, tag)
        except BadRequest as exc:
            if exc.status == 404:
                continue  # this run has no such tag (or ended meanwhile): the others are shown
            raise
        out.append({"id": identifier, **found})
    return {"tag": tag, "runs": out}


def graph_tree(catalog: Catalog, identifier: str, tag: str, position: int | None) -> dict[str, Any]:
    """One logged graph as a module tree with shapes (see :func:`.graphdef.module_tree`).

    Args:
        catalog: the store's catalog.
        identifier: an evaluation or run id.
        tag: the graph's tag (``__graph__`` for ``add_graph``).
        position: which point of the tag; None for the last.

    Returns:
        The tree, plus ``step`` and ``points`` (how many graphs the tag holds).
    """
    kind, events = tag_points(catalog, identifier, tag or "__graph__")
    if kind != "graph" or not events:
        raise BadRequest(f"no graph under {tag!r}", 404)
    index = len(events) - 1 if position is None else position
    if not 0 <= index < len(events) or not isinstance(events[index].get("blob"), str):
        raise BadRequest(f"no graph at point {position} of {tag!r}", 404)
    event = events[index]
    try:
        nodes = parse_graph(catalog.store.objects.get_bytes(event["blob"]))
    except (MemostoreError, KeyError, ValueError) as exc:
        raise BadRequest(f"cannot read the graph of {tag!r}: {exc}", 404) from exc
    tree = module_tree(nodes, event.get("parameters"))
    return {**tree, "step": event.get("step"), "points": len(events)}


def hparams_across(catalog: Catalog, ids: list[str]) -> dict[str, Any]:
    """What ``add_hparams`` recorded in each run: ``{"runs": {id: {"hparams", "metrics"}}}``.

    A run that recorded none is left out; its arguments (in the runs table)
    are its hyper-parameters then.
    """
    out: dict[str, Any] = {}
    if any(len(i) == 32 for i in ids):
        catalog.running()  # makes the runs in progress known to live_logs
    for identifier in ids:
        if len(identifier) == 32:
            logs = catalog.live_logs(identifier)
            if logs is None:
                continue
            with catalog.lock:
                logs.poll()
                found = logs.hparams()
        else:
            try:
                found = logged_hparams(catalog, catalog.logs_of(identifier))
            except BadRequest:
                continue
        if found.get("hparams") or found.get("metrics"):
            out[identifier] = {"hparams": found.get("hparams") or {}, "metrics": found["metrics"]}
    return {"runs": out}
