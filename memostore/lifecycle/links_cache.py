"""The links cache: what each object links and its size, so that a walk of the
object graph need not read every document (nor stat every file) again.

An object never changes (its id names its content), so the links it holds and
its size are facts that cannot go stale: an entry can only be missing, and a
missing entry is read from the object and added. ``index/links`` is
append-only, one line per loose object::

    <id> <size> <doc id>,<doc id>,... <blob id>,<blob id>,...[ e <function> <started> <status>][ d]

with ``-`` for an empty list (and for the size of an object not stored loose).
An evaluation's line also holds the fields of its record that accounting
shows (function and status escaped as ref-name parts), so ``du`` need not
load the evaluation index.
A blob links nothing and is recorded with two empty lists, so that a later walk
need not open it to tell. A file damaged in place may differ from its entry's
size until ``memostore fsck`` finds it (and a recompute replaces it).

A final ``d`` says the object was read whole and checked against its id as a
document (:func:`load_documents`). Lists that are not empty only ever come from
such a read; two empty lists without it may come from a look at the first
bytes only (a blob, or a document damaged there), which gc does not take on
trust (``maintenance.py``).

Concurrency: every append is a single ``write`` on a file opened with
``O_APPEND`` (as ``index.py`` does), so lines of concurrent writers never
interleave. A crash may leave a torn last line; the next append then follows it
on the same line. Such a line fails the shape check below (a field count or an
id length is wrong) and is skipped, so its entries are read from the documents
again. Only whole lines (ending in a newline) are read.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..odb import jsonlines
from ..odb.fsutil import write_atomically
from ..odb.refs import ref_part, unescape_ref_part

if TYPE_CHECKING:
    from ..odb.store import Store

LINKS_FILENAME = "links"
INDEX_DIRNAME = "index"
_ID_LEN = 64
# One line: an id, a size, two lists of hex ids (or "-"), and for an evaluation its
# function, start time and status. Id lengths are checked after.
_LINE_RE = re.compile(
    r"^([0-9a-f]{64}) (-|[0-9]{1,19}) (-|[0-9a-f,]+) (-|[0-9a-f,]+)"
    r"(?: e ([A-Za-z0-9._%-]+) (-|[0-9.eE+-]+) ([A-Za-z0-9._%-]+))?( d)?$",
    re.MULTILINE,
)

# An evaluation's (function, start time or None, status), from its record.
EvaluationInfo = tuple[str, "float | None", str]
# (size or -1 when unknown, docs, blobs, evaluation info or None) of one object.
Entry = tuple[int, tuple[str, ...], tuple[str, ...], "EvaluationInfo | None"]

# cache path -> ((inode, size, mtime), entries, documents): parsed once per process
# while unchanged.
_loaded: dict[Path, tuple[tuple[int, int, int], dict[str, Entry], frozenset[str]]] = {}
_NO_DOCUMENTS: frozenset[str] = frozenset()


def links_path(store: Store) -> Path | None:
    """Where the links cache of *store* lives; None for an in-memory store."""
    if store.root is None:
        return None
    return store.root / INDEX_DIRNAME / LINKS_FILENAME


def load(store: Store) -> Mapping[str, Entry]:
    """Every well-formed entry of the cache, by object id (read-only: it is shared)."""
    return _load(store)[0]


def load_documents(store: Store) -> frozenset[str]:
    """The ids whose entry says they were read and checked as documents (the ``d``)."""
    return _load(store)[1]


def _load(store: Store) -> tuple[Mapping[str, Entry], frozenset[str]]:
    path = links_path(store)
    if path is None:
        return {}, _NO_DOCUMENTS
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = _loaded.get(path)
            if cached is not None and cached[0] == signature:
                return cached[1], cached[2]
            data = f.read()
    except OSError:
        return {}, _NO_DOCUMENTS  # missing or unreadable: a cache, rebuilt as documents are read
    entries, documents = _parse(data)
    _loaded[path] = (signature, entries, documents)
    return entries, documents


def parse(data: bytes) -> dict[str, Entry]:
    """The entries of the cache file's bytes; torn or malformed lines are skipped."""
    return _parse(data)[0]


def _parse(data: bytes) -> tuple[dict[str, Entry], frozenset[str]]:
    # The part after the last newline is a line still being written (or torn).
    text = data[: data.rfind(b"\n") + 1].decode("ascii", errors="replace")
    entries: dict[str, Entry] = {}
    documents: set[str] = set()
    names: dict[str, str] = {}
    # One pass of the regex engine over the whole file: a loop over lines in
    # Python costs twice as much on a store of 10,000 evaluations.
    for object_id, size, docs, blobs, function, started, status, doc in _LINE_RE.findall(text):
        doc_ids = () if docs == "-" else _ids(docs)
        blob_ids = () if blobs == "-" else _ids(blobs)
        if doc_ids is None or blob_ids is None:
            continue
        info = None
        if function:
            try:
                when = None if started == "-" else float(started)
            except ValueError:
                continue
            # Few distinct functions and statuses: unescape each once.
            name = names.get(function)
            if name is None:
                name = names[function] = unescape_ref_part(function)
            state = names.get(status)
            if state is None:
                state = names[status] = unescape_ref_part(status)
            info = (name, when, state)
        entries[object_id] = (-1 if size == "-" else int(size), doc_ids, blob_ids, info)
        # The last line for an id wins, its mark included.
        if doc:
            documents.add(object_id)
        else:
            documents.discard(object_id)
    return entries, frozenset(documents)


def _ids(field: str) -> tuple[str, ...] | None:
    if field == "-":
        return ()
    ids = tuple(field.split(","))
    # A line that ran into the next one (a torn append) has an id of another length.
    if any(len(i) != _ID_LEN for i in ids):
        return None
    return ids


def append(
    store: Store, entries: Iterable[tuple[str, Entry]], documents: Collection[str] = ()
) -> None:
    """Add entries to the cache in one write; never raises (it is a cache).

    An id in *documents*, or already marked in the cache, is marked as read and
    checked as a document: only a caller that did so may name it there.
    """
    path = links_path(store)
    if path is None:
        return
    marked = load_documents(store)
    data = b"".join(
        _line(object_id, entry, object_id in documents or object_id in marked)
        for object_id, entry in entries
    )
    if not data:
        return
    with contextlib.suppress(OSError):
        jsonlines.append(path, data)


def rewrite(store: Store, keep: Iterable[str]) -> int:
    """Replace the cache with the entries of *keep* only (temp file, atomic rename).

    For gc, once the objects it deleted are gone: their entries are dead weight.
    Returns how many entries were written. An append racing with the rename may
    be lost, which costs one document read later, never a wrong answer.
    """
    path = links_path(store)
    if path is None:
        return 0
    entries, documents = _load(store)
    lines = [_line(i, entries[i], i in documents) for i in keep if i in entries]
    write_atomically(path, b"".join(lines))
    return len(lines)


def _line(object_id: str, entry: Entry, document: bool = False) -> bytes:
    size, docs, blobs, info = entry
    fields = [
        object_id,
        str(size) if size >= 0 else "-",
        ",".join(docs) if docs else "-",
        ",".join(blobs) if blobs else "-",
    ]
    if info is not None:
        function, started, status = info
        # ref_part: only [A-Za-z0-9._%-], so no space or newline can enter a line.
        when = "-" if started is None or not math.isfinite(started) else repr(float(started))
        fields += ["e", ref_part(function), when, ref_part(status)]
    if document:
        fields.append("d")
    return (" ".join(fields) + "\n").encode("ascii")
