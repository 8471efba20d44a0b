"""Signatures across push and pull: ``sigs/<evaluation id>`` on the remote as in a store.

- A push signs each evaluation it sends that this store wrote and nobody
  signed yet (one recorded before signing existed, or while no key could be
  had), and sends the signature file of each evaluation it sets a ref to, or
  signed just now, before any ref names it.
- A pull (and an auto-fetch) reads the signature file of each evaluation it
  brings, and of each it holds from elsewhere unsigned; a hit verifies them
  (:func:`memostore.trust.signers.verdict`).

A remote's writer can delete or spoil a signature file (a miss: denial of
service), never make one verify for a key it does not hold.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import MemostoreError
from ..odb.signatures import MAX_BYTES, SIGS_DIR, signature_name, split_lines
from ..trust import signers

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ..odb.store import Store
    from ..transport import Transport


def _is_evaluation(store: Store, object_id: str) -> bool:
    try:
        store.evaluation(object_id)
    except MemostoreError:
        return False
    return True


def _to_send(store: Store, evaluation_id: str, new: bool) -> list[bytes]:
    """The signature lines a push sends for *evaluation_id* (empty: nothing to send).

    One whose ref the remote already holds (*new* False) was sent with that ref,
    unless it was stored unsigned: it is signed now, once, and sent.
    """
    lines = store.signatures.lines(evaluation_id)
    if lines:
        return lines if new else []
    if not _is_evaluation(store, evaluation_id):
        return []
    if signers.verdict(store, evaluation_id).local:
        signers.sign(store, evaluation_id)
    return store.signatures.lines(evaluation_id)


def send(store: Store, transport: Transport, refs: dict[str, bool], pool: Executor) -> None:
    """Before a push sets its refs: send the signatures of the evaluations they name.

    *refs* maps each evaluation id to whether this push sets a ref to it (else
    the remote holds that ref already). No listing, no read: one write per
    signature sent, and none for a push that changes nothing.

    Raises:
        BadKey: an unsigned evaluation of this store needs a key that cannot be had.
    """
    ids = sorted(refs)
    found = pool.map(lambda i: _to_send(store, i, refs[i]), ids)
    for evaluation_id, lines in zip(ids, found, strict=True):
        if lines:
            data = b"".join(line + b"\n" for line in lines)
            transport.add_if_new(signature_name(evaluation_id), data)


def fetch(store: Store, transport: Transport, ids: Iterable[str], pool: Executor) -> None:
    """After a pull stored *ids*' objects, before its refs: bring their signatures."""
    from ..transport import NotFoundOnRemote, RemoteObjectTooLarge, UnsafeRemotePath

    def one(evaluation_id: str) -> None:
        with contextlib.suppress(NotFoundOnRemote, RemoteObjectTooLarge, UnsafeRemotePath):
            data = transport.get_bytes_at_most(signature_name(evaluation_id), MAX_BYTES)
            signers.add_received(store, evaluation_id, split_lines(data))

    list(pool.map(one, sorted(set(ids))))


def unsigned_from_elsewhere(store: Store, ids: Iterable[str]) -> list[str]:
    """Those of *ids* held here from a remote without a signature (a pull may bring one)."""
    return [i for i in ids if not store.signatures.lines(i) and not signers.verdict(store, i).local]


def prune(transport: Transport, deleted: Iterable[str], pool: Executor) -> None:
    """After a remote gc: delete the signature files of evaluations it deleted.

    Only of those still absent: gc's repair may have sent one back for a ref a
    push published meanwhile, and that push's signature stays.
    """
    from .walk import object_name

    gone = set(deleted)
    listed = [name for name in transport.list(SIGS_DIR + "/") if name[len(SIGS_DIR) + 1 :] in gone]
    absent = [n for n in listed if transport.stat(object_name(n[len(SIGS_DIR) + 1 :])) is None]
    list(pool.map(transport.delete, absent))
