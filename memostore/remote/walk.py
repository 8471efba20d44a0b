"""Which objects a transfer must move, and in what order.

The walk relies on one invariant of every store and every remote, which all
writers keep: **objects are written children first, so an object that is
present implies that everything it links to is present too.** The local store
keeps it because values are encoded bottom-up and evaluations are recorded
last; push and pull keep it because they send objects in *waves* (see
:meth:`TransferPlan.waves`), a document only after everything it links to.
An interrupted transfer therefore leaves a destination where every present
object is complete, and the walk can skip the whole subtree below any object
the destination already has: a second push of an unchanged store reads only
its refs.

Nothing here decodes a value: documents are parsed as JSON for their
``links``, and every id read from them is validated before it is used to name
a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..errors import MalformedObject
from ..odb.objects import Doc, is_object_id

# present(ids) -> the subset of ids the destination has.
Presence = Callable[[list[str]], set[str]]
# read_docs(ids) -> the documents, in the same order (read and verified by the source).
DocReader = Callable[[list[str]], list[Doc]]


def object_name(object_id: str) -> str:
    """Where an object lives, in a store and on a remote: ``objects/ab/cdef...``."""
    return f"objects/{object_id[:2]}/{object_id[2:]}"


def checked_links(doc: Doc, where: str) -> tuple[set[str], set[str]]:
    """(linked documents, linked blobs) of *doc*, after checking every id's form.

    Raises:
        MalformedObject: a link is not an object id (a damaged or hostile source).
    """
    docs, blobs = doc.links.docs, doc.links.blobs
    for linked in (*docs, *blobs):
        if not (isinstance(linked, str) and is_object_id(linked)):
            raise MalformedObject(
                f"object {doc.id} on {where} links {str(linked)[:80]!r}, which is not an "
                "object id; the source is damaged, nothing was stored from it"
            )
    return docs, blobs


@dataclass
class TransferPlan:
    """The objects a transfer moves: documents (parsed) and blobs (by id)."""

    docs: dict[str, Doc] = field(default_factory=dict)
    blobs: set[str] = field(default_factory=set)
    children: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.docs) + len(self.blobs)

    def waves(self) -> list[list[str]]:
        """The objects grouped so that each wave needs only earlier waves.

        Wave 0 holds every blob and every document whose links the destination
        has already; a document's wave is one more than its highest planned
        child's. Objects within a wave can be sent in parallel.
        """
        height: dict[str, int] = dict.fromkeys(self.blobs, 0)
        for root in self.docs:
            if root in height:
                continue
            stack: list[tuple[str, bool]] = [(root, False)]
            open_nodes: set[str] = set()
            while stack:
                node, expanded = stack.pop()
                if node in height:
                    continue
                docs, blobs = self.children[node]
                planned = [c for c in (*docs, *blobs) if c in height or c in self.docs]
                if expanded:
                    open_nodes.discard(node)
                    height[node] = 1 + max((height[c] for c in planned), default=-1)
                    continue
                stack.append((node, True))
                open_nodes.add(node)
                for child in planned:
                    # Ids are digests of content, so cycles cannot occur; the
                    # check only keeps a forged graph from looping forever.
                    if child not in height and child not in open_nodes:
                        stack.append((child, False))
        waves: list[list[str]] = [[] for _ in range(max(height.values(), default=-1) + 1)]
        for object_id, h in height.items():
            waves[h].append(object_id)
        return waves


def plan_transfer(
    roots: Iterable[str],
    present: Presence,
    read_docs: DocReader,
    where: str,
) -> TransferPlan:
    """Walk from *roots* down the links, stopping at objects the destination has.

    Args:
        roots: object ids named by the refs being transferred (documents).
        present: which of a batch of ids the destination has (one call per level).
        read_docs: reads and verifies documents from the source.
        where: the source, for messages.
    """
    plan = TransferPlan()
    seen: set[str] = set()
    frontier_docs = [r for r in dict.fromkeys(roots) if r not in seen]
    frontier_blobs: list[str] = []
    seen.update(frontier_docs)
    while frontier_docs or frontier_blobs:
        have = present(frontier_docs + frontier_blobs)
        plan.blobs.update(b for b in frontier_blobs if b not in have)
        missing = [d for d in frontier_docs if d not in have]
        frontier_docs, frontier_blobs = [], []
        for doc in read_docs(missing):
            docs, blobs = checked_links(doc, where)
            plan.docs[doc.id] = doc
            plan.children[doc.id] = (docs, blobs)
            for child in docs:
                if child not in seen:
                    seen.add(child)
                    frontier_docs.append(child)
            for child in blobs:
                if child not in seen:
                    seen.add(child)
                    frontier_blobs.append(child)
    return plan
