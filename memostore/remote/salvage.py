"""A pull that meets damaged objects on the remote skips the refs that need them.

An object the remote holds with the wrong bytes, or lacks although a document
links to it, makes every ref above it unusable: nothing of it could be
restored. It must not stop the refs that never reach it. :class:`Damage`
records each such object, whether it was found while walking the documents
(before anything is stored) or while downloading a blob, and marks every
document above it as unusable too, so that no document reaches the store
before what it links to. Only the remote's faults are absorbed here; a
transport that fails (network, permissions) still fails the pull.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ..errors import MalformedObject, ObjectNotFound
from ..odb.objects import Doc
from ..transport import NotFoundOnRemote, RemoteObjectTooLarge, UnsafeRemotePath
from .transfer import CorruptRemoteObject
from .walk import TransferPlan

# What the remote's own state causes: the object is wrong or absent there.
REMOTE_DAMAGE = (
    CorruptRemoteObject,
    MalformedObject,
    NotFoundOnRemote,
    ObjectNotFound,
    RemoteObjectTooLarge,
    UnsafeRemotePath,
)


def damage_reason(exc: BaseException, object_id: str) -> str:
    """Why *object_id* cannot be taken from the remote, for a skipped ref's reason."""
    if isinstance(exc, (NotFoundOnRemote, ObjectNotFound)):
        return f"object {object_id} is missing on the remote"
    if isinstance(exc, UnsafeRemotePath):
        return f"object {object_id} is a symbolic link on the remote (never followed)"
    if isinstance(exc, CorruptRemoteObject):
        return f"object {object_id} is corrupt on the remote (its bytes hash to {exc.actual})"
    return f"object {object_id} is damaged on the remote ({exc})"


class Damage:
    """The objects of one pull that cannot be taken, and why (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bad: dict[str, str] = {}  # object id -> reason

    def note(self, object_id: str, reason: str) -> None:
        with self._lock:
            self.bad.setdefault(object_id, reason)

    def reading(self, read_doc: Callable[[str], Doc]) -> Callable[[str], Doc | None]:
        """*read_doc*, answering None (and noting why) for a damaged document."""

        def read(object_id: str) -> Doc | None:
            try:
                return read_doc(object_id)
            except REMOTE_DAMAGE as exc:
                self.note(object_id, damage_reason(exc, object_id))
                return None

        return read

    def sizing(self, size_of: Callable[[str], int | None]) -> Callable[[str], int]:
        """*size_of* (None: absent on the remote), noting absent blobs as damage."""

        def size(object_id: str) -> int:
            try:
                found = size_of(object_id)
            except REMOTE_DAMAGE as exc:
                self.note(object_id, damage_reason(exc, object_id))
                return 0
            if found is None:
                self.note(object_id, f"object {object_id} is missing on the remote")
                return 0
            return found

        return size

    def moving(self, plan: TransferPlan, move: Callable[[str], bool]) -> Callable[[str], bool]:
        """*move*, skipping damaged objects and documents that link to one.

        Transfers run in waves (children before parents), so a document's
        children are settled, moved or noted, when its turn comes.
        """

        def guarded(object_id: str) -> bool:
            if object_id in self.bad:
                return False
            children = plan.children.get(object_id)
            if children is not None:
                for child in (*children[0], *children[1]):
                    if child in self.bad:
                        self.note(object_id, self.bad[child])
                        return False
            try:
                return move(object_id)
            except REMOTE_DAMAGE as exc:
                self.note(object_id, damage_reason(exc, object_id))
                return False

        return guarded

    def roots_reaching(self, plan: TransferPlan, roots: Iterable[str]) -> dict[str, str]:
        """{root: reason} for each root whose planned tree holds a damaged object."""
        verdict: dict[str, str | None] = {}

        def reason_below(root: str) -> str | None:
            # Iterative post-order: a forged tree may be deep.
            stack: list[tuple[str, bool]] = [(root, False)]
            open_nodes: set[str] = set()
            while stack:
                node, expanded = stack.pop()
                if node in verdict:
                    continue
                children = plan.children.get(node, (set(), set()))
                linked = (*children[0], *children[1])
                if expanded:
                    open_nodes.discard(node)
                    found = self.bad.get(node)
                    for child in linked:
                        found = found or verdict.get(child)
                    verdict[node] = found
                    continue
                stack.append((node, True))
                open_nodes.add(node)
                # Ids are digests, so no cycle is real; the check keeps a forged one finite.
                stack.extend((c, False) for c in linked if c not in verdict and c not in open_nodes)
            return verdict[root]

        out: dict[str, str] = {}
        for root in roots:
            found = reason_below(root)
            if found is not None:
                out[root] = found
        return out

    def keep_only(self, plan: TransferPlan, roots: Iterable[str]) -> None:
        """Narrow *plan* to what *roots* reach: the objects of skipped refs are not moved."""
        docs: set[str] = set()
        blobs: set[str] = set()
        stack = [r for r in roots if r in plan.docs]
        while stack:
            node = stack.pop()
            if node in docs:
                continue
            docs.add(node)
            linked_docs, linked_blobs = plan.children[node]
            blobs.update(b for b in linked_blobs if b in plan.blobs)
            stack.extend(d for d in linked_docs if d in plan.docs and d not in docs)
        plan.docs = {i: d for i, d in plan.docs.items() if i in docs}
        plan.children = {i: c for i, c in plan.children.items() if i in docs}
        plan.blobs = blobs
