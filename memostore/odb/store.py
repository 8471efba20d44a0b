"""A store: an object database and its refs, in one directory (or in memory).

Layout of a store directory (``docs/format.md``)::

    .memostore/
      FORMAT            "memostore 1"
      config.json       remotes and settings (never credentials)
      objects/ab/cd...  write-once objects, read-only files
      refs/evals/<function>/<call key>   -> evaluation id
      refs/failed/<function>/<call key>  -> newest failed evaluation
      refs/runs/<script>/<evaluation id> -> standalone runs
      tmp/              temp files of writes in progress
      journal/          metric journals of evaluations in progress
      pending/          roots of evaluations in progress (kept by gc)
      leases/           who computes which call right now (single-flight: leases.py)
      checkouts/        copies of restored snapshots and dataset tables (a cache)
      quarantine/       objects that failed their digest check
      sigs/<evaluation id>   who signed each evaluation (signatures.py)
      allowed_signers   whose signed evaluations a hit serves (git's format)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import MemostoreError, RevisionNotFound, StoreNotFound
from .lockfile import HOST, pid_alive
from .object_store import BaseObjectStore, DiskObjectStore, MemoryObjectStore
from .objects import KIND_EVALUATION, Doc, is_object_id
from .refs import BaseRefContainer, DiskRefContainer, MemoryRefContainer
from .signatures import SignatureFiles

ENV_STORE_DIR = "MEMOSTORE_DIR"
STORE_DIRNAME = ".memostore"
FORMAT_LINE = "memostore 1\n"

# Ref namespaces that point at evaluations.
EVALUATION_NAMESPACES = ("evals/", "failed/", "runs/")


class Store:
    """An object database plus refs. ``Store(path)`` opens, creating if needed."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        self.root: Path | None
        if path is None:
            self.root = None
            self.objects: BaseObjectStore = MemoryObjectStore()
            self.refs: BaseRefContainer = MemoryRefContainer()
            self.signatures = SignatureFiles(None)
            self._config: dict[str, Any] = {}
            return
        root = Path(path).expanduser().absolute()
        _refuse_file(root)
        if not (root / "FORMAT").exists():
            if not create:
                raise StoreNotFound(
                    f"no memostore store at {root}; create one by running a memoised "
                    "function there, or pass --store PATH"
                )
            _initialise(root)
        self.root = root
        self.objects = DiskObjectStore(root)
        self.refs = DiskRefContainer(root)
        self.signatures = SignatureFiles(root)
        self._config = {}

    @classmethod
    def in_memory(cls) -> Store:
        """A store that lives in this process only (tests, scratch)."""
        return cls(None)

    @classmethod
    def default(cls, *, create: bool = True) -> Store:
        """The active store: ``$MEMOSTORE_DIR``, else the nearest ``.memostore/``
        upward from the working directory, else ``.memostore/`` created at the
        git root (or the working directory when there is none)."""
        return cls(default_store_path(create=create), create=create)

    def __repr__(self) -> str:
        root = getattr(self, "root", None)  # a failed __init__ leaves no root
        return f"Store({str(root) if root else '<memory>'!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Store):
            return NotImplemented
        if self.root is None or other.root is None:
            return self is other
        return self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root) if self.root is not None else id(self)

    # -- paths --------------------------------------------------------------------------
    def subdir(self, name: str) -> Path:
        """A working directory inside the store (journal/, tmp/); memory stores have none."""
        if self.root is None:
            raise MemostoreError("an in-memory store has no directory")
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- configuration ------------------------------------------------------------------------
    @property
    def config_path(self) -> Path | None:
        return self.root / "config.json" if self.root else None

    def read_config(self) -> dict[str, Any]:
        path = self.config_path
        if path is None:
            return self._config
        try:
            config = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (ValueError, RecursionError) as exc:
            raise MemostoreError(f"{path} is not valid JSON ({exc}); fix or remove it") from exc
        except OSError as exc:
            raise MemostoreError(
                f"cannot read {path} ({exc.strerror or exc}); fix its mode or remove it"
            ) from exc
        if not isinstance(config, dict):
            raise MemostoreError(
                f"{path} must hold a JSON object, not {_json_type(config)}; fix or remove it"
            )
        return config

    def write_config(self, config: dict[str, Any]) -> None:
        path = self.config_path
        if path is None:
            self._config = config
            return
        tmp = path.with_name(f"config.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    # -- evaluations ----------------------------------------------------------------------------
    def evaluation(self, evaluation_id: str) -> Doc:
        """The evaluation document with this id."""
        doc = self.objects.get_doc(evaluation_id)
        if doc.kind != KIND_EVALUATION:
            raise RevisionNotFound(f"{evaluation_id} is a {doc.kind}, not an evaluation")
        return doc

    # -- evaluations in progress ------------------------------------------------------------
    # An evaluation stores its arguments before its body runs and publishes its
    # record only at the end, maybe hours later. Until then nothing reachable
    # from refs names those objects, so a marker file lists them as roots that
    # gc must keep: it holds the writer's pid and host so a crashed writer's
    # marker can be recognised as stale.
    def mark_pending(self, run_id: str, roots: list[str]) -> None:
        if self.root is None:
            return
        path = self.subdir("pending") / f"{run_id}.json"
        info = {"pid": os.getpid(), "host": HOST, "started": time.time(), "roots": roots}
        # Written whole or not at all: a writer killed mid-write leaves a hidden
        # temp file (removed by gc), never a marker that cannot be read.
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_text(json.dumps(info))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()  # e.g. a full disk: leave nothing behind
            raise

    def clear_pending(self, run_id: str) -> None:
        if self.root is None:
            return
        with contextlib.suppress(FileNotFoundError):
            (self.root / "pending" / f"{run_id}.json").unlink()

    def pending_roots(self, stale_after: float = 7 * 24 * 3600) -> set[str]:
        """Object ids that evaluations still running (or recently crashed) rely on.

        A marker is dropped once its writer is known dead (same host, pid gone)
        or it is older than *stale_after* seconds. A marker that cannot be read
        adds nothing (and is left in place): :meth:`damaged_pending` names it.
        """
        roots: set[str] = set()
        for path in self._pending_files():
            info = _read_pending(path)
            if info is None or isinstance(info, str):
                continue
            started, host, pid, ids = info
            dead = host == HOST and not pid_alive(pid, started)
            if dead or time.time() - started > stale_after:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            roots.update(ids)
        return roots

    def damaged_pending(self) -> list[tuple[Path, str]]:
        """(path, reason) for each pending marker that cannot be read (for gc and fsck).

        mark_pending writes markers whole, so one of these was damaged or
        written by something else; what it protects is unknown.
        """
        damaged = []
        for path in self._pending_files():
            info = _read_pending(path)
            if isinstance(info, str):
                damaged.append((path, info))
        return damaged

    def _pending_files(self) -> list[Path]:
        if self.root is None:
            return []
        try:
            return sorted(p for p in (self.root / "pending").glob("*.json"))
        except OSError:
            return []

    def iter_evaluation_refs(self) -> Iterator[tuple[str, str]]:
        """(ref name, evaluation id) for every ref that names an evaluation."""
        for namespace in EVALUATION_NAMESPACES:
            yield from self.refs.iter(namespace)


# A pending marker read: (started, host, pid, root ids), or why it cannot be used.
_Pending = tuple[float, str, int, list[str]]
_PENDING_MAX_BYTES = 64 << 20


def _read_pending(path: Path) -> _Pending | str | None:
    """The fields of one pending marker, checked; the reason it is unusable; or None
    when it is gone."""
    try:
        # O_NOFOLLOW: a marker is a file gc itself wrote, never a link to elsewhere.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None  # cleared by its writer meanwhile
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "is not a regular file"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(_PENDING_MAX_BYTES + 1)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    try:
        info = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        return "is not valid JSON"
    if not isinstance(info, dict):
        return f"holds {_json_type(info)}, not a JSON object"
    started, host, pid, roots = (info.get(k) for k in ("started", "host", "pid", "roots"))
    if type(started) not in (int, float) or not math.isfinite(started):
        return "has no valid 'started' time"
    if not isinstance(host, str) or type(pid) is not int:
        return "has no valid 'host' and 'pid'"
    if not isinstance(roots, list) or not all(is_object_id(r) for r in roots):
        return "has a 'roots' member that is not a list of object ids"
    return float(started), host, pid, roots


def _json_type(value: object) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _refuse_file(root: Path) -> None:
    """Refuse a store path that is a file, or lies under one (mkdir would say "File exists")."""
    for path in (root, *root.parents):
        if path.is_dir():
            return
        if path.exists():
            where = "is a file" if path == root else f"is inside {path}, a file"
            raise StoreNotFound(
                f"the store path {root} {where}, not a memostore store: point $MEMOSTORE_DIR "
                "(or --store, or @memo(store=...)) at a directory, which is created if "
                "missing, or move the file away"
            )


def _initialise(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("objects", "refs", "tmp"):
        (root / sub).mkdir(exist_ok=True)
    # A store inside a git work tree stays out of `git status`, as a .venv does.
    ignore = root / ".gitignore"
    if not ignore.exists():
        ignore.write_text(
            "# created by memostore: a store is not committed (memostore push shares it)\n*\n"
        )
    fmt = root / "FORMAT"
    tmp = root / f"FORMAT.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(FORMAT_LINE)
    # Several processes (and threads) may create the same store at once: each writes the same
    # content, and the rename makes the file appear whole.
    os.replace(tmp, fmt)


_default_cache: dict[tuple[str | None, str], Path] = {}
_default_lock = threading.Lock()


def default_store_path(*, create: bool = True) -> Path:
    """Where :meth:`Store.default` opens (see there); cached per cwd and env."""
    env = os.environ.get(ENV_STORE_DIR) or None
    cwd = os.getcwd()
    key = (env, cwd)
    cached = _default_cache.get(key)
    if cached is not None and (cached / "FORMAT").exists():
        return cached
    if env:
        path = Path(env).expanduser().absolute()
    else:
        path = _find_upward(Path(cwd)) or _new_store_location(Path(cwd))
    with _default_lock:
        _default_cache[key] = path
    return path


def _find_upward(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / STORE_DIRNAME
        if (candidate / "FORMAT").is_file():
            return candidate
    return None


def _new_store_location(cwd: Path) -> Path:
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory / STORE_DIRNAME
    return cwd / STORE_DIRNAME
