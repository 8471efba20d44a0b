"""What a body reads from outside its arguments: environment variables, files, directory listings.

A body that reads ``os.environ["HIDDEN"]``, opens ``cfg.data / "train.csv"`` or
lists ``data/`` computes from what it found there, wherever the name came from
(an argument, a dataclass config, an OmegaConf node, a constant). A miss
records each read with what it saw; a stored evaluation answers a call only
while every recorded read would see the same (``call/hits.py``,
``call/rng_conditions.py``). One frame per running body records all three.

**Environment variables** are seen by wrapping ``os.environ``'s item lookup
(``os.getenv``, ``os.environ.get``, ``"X" in os.environ``), only for lookups
made by the user's code, not inside libraries. Recorded: the value, or None.

**Files and listings** are seen by one process-wide audit hook
(``sys.addaudithook``: the ``open``, ``os.listdir`` and ``os.scandir``
events), installed with the first body; audit hooks cannot be removed, so
outside a body it costs a thread-local look-up per such event. Reads made by
libraries count (``pd.read_csv``, ``torch.load``), but not:

* the interpreter's and installed packages' files (``sys.prefix``,
  ``sys.base_prefix``, site-packages), nor Python source or bytecode (code is
  keyed by its dependency closure, not as data; tracebacks and warnings read
  it), nor what the import system opens or lists;
* files opened for writing, and files the body wrote before reading them (its
  own scratch files);
* the store, and ``/proc``, ``/sys``, ``/dev``;
* reads in other threads or processes (DataLoader workers): declare those
  paths with ``@memo(files=...)``.

A file is recorded by content (``values/file_digests.py``), with its stat
signature (device, inode, size, mtime, ctime) when that is old enough to be
trusted: a later check that finds the same signature knows the content without
reading it, in any process (DVC's state database, kept in the record itself).
A listing is recorded by the digest of its sorted names: a file added to a
dataset directory the body lists is a change. A path that did not exist is
recorded as None.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..code.modules import is_user_module, library_roots
from ..odb.objects import digest_bytes
from ..values.file_digests import RACY_WINDOW_NS, file_digests

__all__ = [
    "Frame",
    "begin",
    "changed",
    "drop",
    "end",
    "note",
    "now",
    "recorded",
]

_local = threading.local()
_install_lock = threading.Lock()
_environ_class = type(os.environ)
_lookup = _environ_class.__getitem__
# Frames of the environment lookups themselves, skipped to find who asked.
# (``Mapping.get`` runs with ``__name__`` "collections.abc".)
_LOOKUP_MODULES = frozenset({"os", "_collections_abc", "collections.abc"})
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".pyd", ".so", ".pth")
_LISTING_PREFIX = b"memostore:listing:1\n"
_FILE, _LISTING, _MADE = "file", "listing", "made"


def _system_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.update(str(root) for root in library_roots())  # stdlib, site-packages
    roots.update(os.path.realpath(r) for r in list(roots))
    return tuple(sorted({os.path.join(r, "") for r in roots if r}))


# Directories whose reads are never inputs: the interpreter's, /proc..., and the stores.
_skipped: tuple[str, ...] = (*_system_roots(), "/proc/", "/sys/", "/dev/")


@dataclass
class Frame:
    """What one running body has read so far.

    Attributes:
        environ: variable -> value it had (None: unset).
        paths: absolute path -> ``"file"`` or ``"listing"``, in order of first read.
        entries: reads known already with their record (from hits inside the body).
        written: paths the body opened for writing.
    """

    environ: dict[str, str | None] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)


def _frames() -> list[Frame]:
    frames = getattr(_local, "frames", None)
    if frames is None:
        frames = _local.frames = []
    return frames


# -- observing ----------------------------------------------------------------------------
def _asked_by_user() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _LOOKUP_MODULES:
        frame = frame.f_back
    if frame is None:
        return False
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and is_user_module(name)


def _recording_lookup(self: Any, key: Any) -> Any:
    frames = getattr(_local, "frames", None)
    if not frames or self is not os.environ or type(key) is not str:
        return _lookup(self, key)
    try:
        value = _lookup(self, key)
    except KeyError:
        if _asked_by_user():
            for frame in frames:
                frame.environ.setdefault(key, None)
        raise
    if _asked_by_user():
        for frame in frames:
            frame.environ.setdefault(key, value)
    return value


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event of the process, in any thread: cheap first.
    if event == "open":
        kind = _FILE
    elif event == "os.listdir" or event == "os.scandir":
        kind = _LISTING
    elif event == "os.mkdir":
        kind = _MADE
    else:
        return
    frames = getattr(_local, "frames", None)
    if not frames or getattr(_local, "busy", False):
        return
    path = args[0]
    if path is None:
        path = "."  # os.listdir() and os.scandir() list the working directory
    if isinstance(path, int):
        return  # an open descriptor: no name to check later
    caller = sys._getframe(1).f_globals.get("__name__")
    if isinstance(caller, str) and "importlib" in caller:
        return  # the import system finding modules
    try:
        text = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return
    if text.startswith(_skipped) or text.endswith(_CODE_SUFFIXES):
        return
    if kind is _MADE or (kind is _FILE and args[2] & _WRITING):
        for frame in frames:
            frame.written.add(text)
        return
    for frame in frames:
        if text not in frame.written:
            frame.paths.setdefault(text, kind)


def _install() -> None:
    with _install_lock:
        if _environ_class.__getitem__ is not _recording_lookup:
            _environ_class.__getitem__ = _recording_lookup  # type: ignore[method-assign]
            sys.addaudithook(_audit)


def begin(skip: str | os.PathLike[str] | None = None) -> Frame:
    """Start recording what a body reads; *skip*: a directory (the store) never recorded."""
    global _skipped
    _install()
    if skip is not None:
        root = os.path.join(os.path.abspath(os.fspath(skip)), "")
        if root not in _skipped:
            _skipped = (*_skipped, root)
    frame = Frame()
    _frames().append(frame)
    return frame


def drop(frame: Frame) -> None:
    """Stop recording *frame* (a body that failed: nothing to record)."""
    frames = _frames()
    for i in range(len(frames) - 1, -1, -1):
        if frames[i] is frame:  # by identity: two frames may hold equal records
            del frames[i]
            break


def end(frame: Frame) -> dict[str, Any]:
    """Stop recording *frame*; the record fields of what it read (``environ``, ``files``)."""
    drop(frame)
    out: dict[str, Any] = {}
    if frame.environ:
        out["environ"] = dict(sorted(frame.environ.items()))
    files = dict(frame.entries)
    _local.busy = True  # the reads below are memostore's own, not the outer bodies'
    try:
        # A directory the body made or wrote into lists its own output: not an input.
        made = {os.path.dirname(w) for w in frame.written} | frame.written
        for path, kind in frame.paths.items():
            if path in files or path in frame.written:
                continue
            if kind is _LISTING and path in made:
                continue
            files[path] = _entry(path, kind, signed=True)
    finally:
        _local.busy = False
    if files:
        out["files"] = dict(sorted(files.items()))
    return out


def note(body: Mapping[str, Any]) -> None:
    """A hit inside running bodies: they depend on what its evaluation read, too."""
    frames = getattr(_local, "frames", None)
    if not frames:
        return
    environ = body.get("environ") or {}
    files = body.get("files") or {}
    for frame in frames:
        for name, value in environ.items():
            frame.environ.setdefault(name, value)
        for path, entry in files.items():
            frame.entries.setdefault(path, entry)


# -- checking -----------------------------------------------------------------------------
def _entry(path: str, kind: str, signed: bool = False) -> dict[str, Any]:
    """What *path* holds now, as a record entry (with its stat signature if *signed*)."""
    if kind == _LISTING:
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return {"kind": kind, "digest": None}
        text = "".join(f"{n}\0" for n in names).encode("utf-8", "surrogateescape")
        return {"kind": kind, "digest": digest_bytes(_LISTING_PREFIX + text)}
    started = time.time_ns()
    try:
        digest, st = file_digests.digest(path)
    except (OSError, ValueError):  # gone, or not a regular file any more
        return {"kind": kind, "digest": None}
    entry: dict[str, Any] = {"kind": kind, "digest": digest}
    if signed and max(st.st_mtime_ns, st.st_ctime_ns) < started - RACY_WINDOW_NS:
        entry["stat"] = _signature(st)
    return entry


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _digest_now(path: str, entry: Mapping[str, Any]) -> str | None:
    signature = entry.get("stat")
    if signature is not None:
        try:
            if _signature(os.stat(path)) == signature:
                return entry.get("digest")  # the same file, untouched since it was recorded
        except OSError:
            return None
    return _entry(path, entry.get("kind", _FILE))["digest"]


def recorded(body: Mapping[str, Any]) -> dict[str, Any]:
    """The reads of a stored evaluation as a hit condition (values and digests only)."""
    out: dict[str, Any] = {}
    if body.get("environ"):
        out["environ"] = dict(body["environ"])
    if body.get("files"):
        out["files"] = {path: e.get("digest") for path, e in body["files"].items()}
    return out


def now(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the reads of a stored evaluation would see now, as :func:`recorded` gives them."""
    out: dict[str, Any] = {}
    environ = body.get("environ")
    if environ:
        out["environ"] = _environ_now(environ)
    files = body.get("files")
    if files:
        _local.busy = True
        try:
            out["files"] = {path: _digest_now(path, e) for path, e in files.items()}
        finally:
            _local.busy = False
    return out


def _environ_now(names: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = _lookup(os.environ, name)
        except KeyError:
            out[name] = None
    return out


def changed(body: Mapping[str, Any], current: Mapping[str, Any] | None = None) -> str:
    """Why the stored evaluation's reads would see something else now ("" if they would not).

    *current*: :func:`now` of *body*, when the caller has it.
    """
    if not body.get("environ") and not body.get("files"):
        return ""
    then = recorded(body)
    current = now(body) if current is None else current
    reasons = []
    environ = [n for n, v in then.get("environ", {}).items() if current["environ"].get(n) != v]
    if environ:
        reasons.append(
            f"the environment variable {', '.join(environ)} the stored call read has another "
            "value now"
        )
    files = [p for p, d in then.get("files", {}).items() if current["files"].get(p) != d]
    if files:
        kinds = body.get("files") or {}
        shown = [_shown(p, kinds.get(p, {}).get("kind")) for p in files[:3]]
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        reasons.append(f"{', '.join(shown)}{more} changed")
    return "; ".join(reasons)


def _shown(path: str, kind: str | None) -> str:
    """*path* relative to the working directory when it lies below it; a listing ends in /."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    shown = path if rel.startswith("..") else rel
    return os.path.join(shown, "") if kind == _LISTING else shown
