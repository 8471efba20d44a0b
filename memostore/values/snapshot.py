"""Files and directories as content-addressed values.

``snapshot(path)`` hashes a file or a directory tree *now* and returns a
:class:`Snapshot`: a value whose digest is its content (names, bytes and the
executable bit), never its location or timestamps. Returned from a memoised
function (say, one that downloads a data set), the files are stored as blobs;
restoring lays them out under the store's ``checkouts/`` directory as
read-only copies of the stored objects (reflinks where the file system has
them), checked before each restore (see :mod:`memostore.odb.checkouts`), so a
store that was pulled serves the data offline.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CorruptObject, DecodeError, EncodeError, MemostoreError
from ..odb.objects import canonical_json, digest_bytes, new_hasher
from .codecs import Codec, register_codec

_READ_CHUNK = 16 << 20


@dataclass(frozen=True)
class SnapshotEntry:
    """One file of a snapshot: its path relative to the root, content id, size, mode."""

    relpath: str
    blob: str
    size: int
    executable: bool


class Snapshot:
    """The content of a file or directory at the moment it was taken.

    Attributes:
        path: where the files are now (the original location, or the
            materialised checkout after a restore).
        name: the base name of the snapshotted file or directory.
        is_dir: whether the snapshot is a directory tree.
        entries: the files, sorted by relative path.
    """

    def __init__(
        self, path: Path, name: str, is_dir: bool, entries: tuple[SnapshotEntry, ...]
    ) -> None:
        self.path = Path(path)
        self.name = name
        self.is_dir = is_dir
        self.entries = entries

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        kind = "directory" if self.is_dir else "file"
        return f"<Snapshot {kind} {self.name!r}: {len(self.entries)} files, {self.size} bytes>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (self.name, self.is_dir, self.entries) == (other.name, other.is_dir, other.entries)

    def __hash__(self) -> int:
        return hash((self.name, self.is_dir, self.entries))

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def files(self) -> Iterator[Path]:
        """Paths of every file, in order."""
        for entry in self.entries:
            yield self.path / entry.relpath if self.is_dir else self.path


def _hash_file(path: Path) -> tuple[str, int]:
    size = path.stat().st_size
    hasher = new_hasher(size)
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest(), size


def _entry(path: Path, relpath: str) -> SnapshotEntry:
    blob, size = _hash_file(path)
    executable = bool(path.stat().st_mode & stat.S_IXUSR)
    return SnapshotEntry(relpath, blob, size, executable)


def snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Take a content-addressed snapshot of a file or a directory tree.

    Symbolic links are followed; empty directories are not recorded. Files
    that change after the snapshot is taken are detected when it is stored.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise MemostoreError(f"cannot snapshot {root}: no such file or directory")
    root = root.resolve()
    if root.is_file():
        return Snapshot(root, root.name, False, (_entry(root, root.name),))
    entries = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for filename in sorted(filenames):
            full = Path(dirpath) / filename
            entries.append(_entry(full, full.relative_to(root).as_posix()))
    entries.sort(key=lambda e: e.relpath)
    return Snapshot(root, root.name, True, tuple(entries))


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            yield chunk


class SnapshotCodec(Codec):
    """Stores a snapshot as a list of (path, blob, size, executable) entries."""

    tag = "snapshot"
    types = (Snapshot,)

    def encode(self, snap: Snapshot, enc: Any) -> dict[str, Any]:
        entries = []
        for entry, source in zip(snap.entries, snap.files(), strict=True):
            try:
                blob = enc.blob(
                    lambda source=source: _file_chunks(source), entry.size, known_id=entry.blob
                )
            except CorruptObject:
                raise EncodeError(
                    f"{source} changed after snapshot() was taken; take the snapshot again"
                ) from None
            except FileNotFoundError:
                raise EncodeError(
                    f"{source} was deleted after snapshot() was taken; take the snapshot again"
                ) from None
            entries.append([entry.relpath, blob, entry.size, entry.executable])
        return {"name": snap.name, "dir": snap.is_dir, "entries": entries}

    def fingerprint(self, snap: Snapshot) -> Any:
        # A Snapshot's content is fixed when it is taken, so its digest never changes.
        return ("snapshot", snap.name, snap.is_dir, snap.entries)

    def decode(self, node: dict[str, Any], dec: Any) -> Snapshot:
        name, is_dir, entries = _parse_node(node)
        key = digest_bytes(canonical_json(node))
        from ..odb.checkouts import ensure_checkout  # on first restore, not with memostore

        path = ensure_checkout(dec.objects, key, "snapshot", name, is_dir, entries)
        return Snapshot(path, name, is_dir, entries)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        entries = node.get("entries")
        entries = entries if isinstance(entries, list) else []
        return {
            "type": "snapshot",
            "name": node.get("name"),
            "files": len(entries),
            "bytes": sum(e[2] for e in entries if _is_entry(e) and type(e[2]) is int),
        }


def _is_entry(item: Any) -> bool:
    return isinstance(item, list) and len(item) == 4


def _parse_node(node: Any) -> tuple[str, bool, tuple[SnapshotEntry, ...]]:
    """The name, kind and entries of a stored snapshot, checked (the value is data only).

    Raises:
        DecodeError: the node is malformed; the layout itself is checked when
            the files are laid out (:func:`memostore.odb.checkouts.check_layout`).
    """
    name, is_dir, items = node.get("name"), node.get("dir"), node.get("entries")
    if not isinstance(name, str) or type(is_dir) is not bool or not isinstance(items, list):
        raise DecodeError("malformed snapshot: it needs a name, a kind and a list of entries")
    entries = []
    for item in items:
        if not _is_entry(item):
            raise DecodeError(f"snapshot {name!r}: malformed entry {str(item)[:80]}")
        entries.append(SnapshotEntry(*item))
    return name, is_dir, tuple(entries)


register_codec(SnapshotCodec())
