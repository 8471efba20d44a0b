"""Origin records across push and pull (the layout is the store's: ``origins.py``).

- A pull records every object it is about to store as coming from the remote
  it pulls from, and from every source that remote's own records name for
  it, before the first object arrives.
- A push first sends the records of the objects it sends that came from
  elsewhere: one journal per source and push. So an object pulled from A
  and pushed to B is still A's in a store that pulls it from B.

A remote's records can only add sources to an object, never remove the
remote itself: trusting a remote that lists no origins trusts what it
holds, while its listing another source makes trust need that source too.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..trust.origins import (
    KEY_HEX,
    ORIGINS_DIR,
    SOURCES_DIR,
    Source,
    configured_sources,
    descriptor_name,
    journal_bytes,
    journal_name,
    origins_of,
    parse_journal,
    record,
    source_of_transport,
)

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ..odb.store import Store
    from ..transport import Transport
    from .walk import TransferPlan

# (remote URL, journal name) -> its ids: remote journals are written once, never changed.
_remote_journals: dict[tuple[str, str], frozenset[str]] = {}
# The most bytes a remote's origin records are read for. A descriptor holds a URL,
# an endpoint and a name; a journal 65 bytes per object one push sent (a million
# objects: 65 MB). Bigger files are never read whole (docs/threat-model.md).
DESCRIPTOR_MAX_BYTES = 64 << 10
JOURNAL_MAX_BYTES = 128 << 20
_lock = threading.Lock()


def _planned(plan: TransferPlan) -> list[str]:
    return sorted({*plan.docs, *plan.blobs})


def record_pull(store: Store, transport: Transport, plan: TransferPlan, pool: Executor) -> None:
    """Before a pull stores *plan*'s objects: record each as the remote's (and its sources')."""
    ids = _planned(plan)
    if not ids:
        return
    here = source_of_transport(transport, _remote_name(store, transport))
    claims = remote_claims(transport, set(ids), pool)
    record(store, {i: {here, *claims.get(i, ())} for i in ids})


def _remote_name(store: Store, transport: Transport) -> str:
    key = source_of_transport(transport).key
    try:
        remote = configured_sources(store).get(key)
    except Exception:  # a damaged config: the record simply carries no name
        return ""
    return remote.name if remote is not None else ""


def remote_claims(transport: Transport, ids: set[str], pool: Executor) -> dict[str, set[Source]]:
    """The sources a remote's own records name for some of *ids*.

    One listing of ``origins/`` on the remote, then one read of each journal
    not read before by this process (none on a remote that holds only its own
    objects).
    """
    from ..transport import NotFoundOnRemote, RemoteObjectTooLarge

    names = list(transport.list(ORIGINS_DIR + "/"))
    descriptors: dict[str, str] = {}
    journals: list[tuple[str, str]] = []
    for name in names:
        rest = name[len(ORIGINS_DIR) + 1 :]
        if name.startswith(SOURCES_DIR + "/"):
            key, _, ext = name[len(SOURCES_DIR) + 1 :].partition(".")
            if ext == "json" and len(key) == KEY_HEX:
                descriptors[key] = name
        elif name.endswith(".ids") and rest.count("/") == 1:
            journals.append((rest.split("/")[0], name))
    sources: dict[str, Source] = {}
    # Only the descriptors of sources some journal lists: each is one request.
    for key in sorted({key for key, _ in journals} & descriptors.keys()):
        try:
            source = Source.from_bytes(
                transport.get_bytes_at_most(descriptors[key], DESCRIPTOR_MAX_BYTES)
            )
        except (NotFoundOnRemote, RemoteObjectTooLarge):
            continue  # no honest descriptor is that large: it names nothing
        # A descriptor that does not match its key names nothing (its records
        # are dropped: the objects are still the pulled remote's).
        if source is not None and source.key == key:
            sources[key] = source
    wanted = [(key, name) for key, name in journals if key in sources]
    contents = pool.map(lambda kn: _remote_journal(transport, kn[1]), wanted)
    claims: dict[str, set[Source]] = {}
    for (key, _), listed in zip(wanted, contents, strict=True):
        for object_id in listed & ids:
            claims.setdefault(object_id, set()).add(sources[key])
    return claims


def _remote_journal(transport: Transport, name: str) -> frozenset[str]:
    from ..transport import NotFoundOnRemote

    cache_key = (transport.url, name)
    with _lock:
        cached = _remote_journals.get(cache_key)
    if cached is not None:
        return cached
    try:
        # Too large: RemoteObjectTooLarge fails the pull. Ignoring the journal would drop
        # its claims, and an object a trusted remote holds for an untrusted one would
        # then count as the trusted remote's own.
        ids = frozenset(parse_journal(transport.get_bytes_at_most(name, JOURNAL_MAX_BYTES)))
    except NotFoundOnRemote:
        return frozenset()
    with _lock:
        _remote_journals[cache_key] = ids
    return ids


def send_origins(store: Store, transport: Transport, plan: TransferPlan, pool: Executor) -> None:
    """Before a push sends *plan*'s objects: send the records of those from elsewhere."""
    ids = _planned(plan)
    if not ids or (store.root is not None and not (store.root / SOURCES_DIR).exists()):
        return  # the common case: this store never pulled, nothing came from elsewhere
    by_source: dict[Source, list[str]] = {}
    found = pool.map(lambda i: origins_of(store.objects, i), ids)
    for object_id, sources in zip(ids, found, strict=True):
        for source in sources:
            by_source.setdefault(source, []).append(object_id)
    for source, listed in by_source.items():
        transport.add_if_new(descriptor_name(source.key), source.to_bytes())
        transport.add_if_new(journal_name(source.key), journal_bytes(listed))
