"""The part of ``SummaryWriter`` that is not an ``add_*`` method: runs, evaluations, life cycle.

:class:`WriterBase` holds what a writer is (its run, its settings, its
optional event-file twin), finds the evaluation each point goes to (the
innermost memoised call, else the writer's own standalone run evaluation),
and gives the ``add_*`` methods (:mod:`.writer`, :mod:`.media`) and the file
writer (:mod:`.file_writer`) one way to store a point into a run:
``_put_scalar``, ``_put_event``, ``_keep_in``, ``_put_session``. Those never
raise: a point memostore fails to store is dropped with one
:class:`MemostoreWarning`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from ..errors import warn
from ..records import context, standalone
from ..records.group import other_rank
from . import event_files as written_through
from . import runs
from .attach import journal_for
from .file_writer import FileWriter
from .journal import Journal
from .seal import json_safe

_warned: set[Any] = set()
current_evaluation = context.current_evaluation  # read on every point: a ContextVar.get
_TARGETS = "memostore.metrics.writer"
_tokens = itertools.count()


def warn_once(key: Any, message: str) -> None:
    """Warn with *message* once per *key* and process."""
    if key in _warned:
        return
    _warned.add(key)
    warn(message)


def wall_time(walltime: Any) -> float:
    """A point's wall time: *walltime*, or now."""
    return time.time() if walltime is None else float(walltime)


def checked_step(step: Any) -> int:
    """A point's step as TensorBoard records it: an int of 64 bits, 0 when missing."""
    # TensorBoard records a missing step as 0.
    if step is None:
        return 0
    step = int(step)
    if not -(1 << 63) <= step < (1 << 63):
        raise ValueError(f"step {step} does not fit in 64 bits")
    return step


def default_log_dir(comment: str = "") -> str:
    """TensorBoard's default ``log_dir``: ``runs/<Mon>DD_HH-MM-SS_<host><comment>``."""
    stamp = datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")


class _View:
    """An evaluation's journal as one run sees it: the run's tags become their names there."""

    __slots__ = ("__weakref__", "_names", "journal", "registry", "run")

    def __init__(self, journal: Journal, registry: runs.RunNames, run: runs.Run) -> None:
        self.journal = journal
        self.registry = registry
        self.run = run
        self._names: dict[str, str] = {}

    @property
    def sealed(self) -> bool:
        return self.journal.sealed

    def name(self, tag: str, shown: str | None = None, owner: runs.Run | None = None) -> str:
        name = self._names.get(tag)
        if name is None:
            name = self._names[tag] = self.registry.name(self.journal, self.run, tag, shown, owner)
        return name

    def add_scalar(self, tag: str, step: int, value: float, wall: float) -> None:
        self.journal.add_scalar(self.name(tag), step, value, wall)

    def add_event(self, event: dict[str, Any]) -> None:
        tag = event.get("tag")
        if tag is not None and event.get("kind") not in runs.UNNAMED_KINDS:
            event["tag"] = self.name(str(tag))
        self.journal.add_event(event)

    def flush(self) -> None:
        self.journal.flush()


class _Target:
    """Where a writer logs now: an evaluation, its journal, and a view per run."""

    __slots__ = ("ctx", "journal", "key", "main", "names", "registry", "views")

    def __init__(
        self,
        key: Any,
        ctx: context.EvalContext,
        journal: Journal,
        run: runs.Run,
        purge_step: int | None = None,
    ) -> None:
        self.key = key  # the current evaluation when attached (None: the writer's own run)
        self.ctx = ctx
        self.journal = journal
        self.registry = runs.registry_for(ctx)
        self.registry.declare(journal, run, purge_step)
        self.main = _View(journal, self.registry, run)
        self.names = self.main._names  # tag -> name of the writer's own run: add_scalar reads it
        self.views = {run.name: self.main}

    def view(self, run: runs.Run) -> _View:
        view = self.views.get(run.name)
        if view is None:
            self.registry.declare(self.journal, run)
            view = self.views[run.name] = _View(self.journal, self.registry, run)
        return view


class WriterBase:
    """Settings, run, attachment and life cycle of a :class:`.writer.SummaryWriter`."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: int = 120,
        filename_suffix: str = "",
        write_to_disk: bool = True,
        *,
        logdir: str | os.PathLike[str] | None = None,
        comet_config: Mapping[str, Any] | None = None,
        event_files: bool | str | None = None,
        all_ranks: bool = False,
    ) -> None:
        defaulted = not log_dir and not logdir
        if not log_dir:
            log_dir = logdir or default_log_dir(comment)
        rank = other_rank()  # not rank 0 of a torch.distributed job: TensorBoard's rank-0 rule
        if rank is not None:
            if all_ranks:
                log_dir = os.path.join(os.fspath(log_dir), f"rank{rank}")
            else:
                write_to_disk = False
        self._log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self._off = not write_to_disk
        self._token = next(_tokens)
        self._run = runs.Run(
            runs.run_path(log_dir), os.path.abspath(os.fspath(log_dir)), default_dir=defaulted
        )
        self._purge_pending = purge_step is not None
        self._metadata: tuple[Any, Any] | None = None
        self._cache: _Target | None = None
        self._own: context.EvalContext | None = None
        self._closed = False
        self._file_writer: FileWriter | None = None
        self._scalar_runs: dict[tuple[str, str], tuple[str, runs.Run]] = {}
        self._exported: dict[str, int] = {}
        self._tee: Any = None
        self._backend: str | None = None
        # Made on first use (a point, or the directory asked for), not by a writer
        # that never logs; the original writer, when there is one, makes it itself.
        self._dir_ready = False
        if comet_config and not comet_config.get("disabled", False):
            warn_once("comet", "comet_config is passed on only with event_files='tensorboardX'")
        backend = None if self._off else written_through.choose(event_files)
        if backend is not None:
            settings = {
                "comment": comment,
                "purge_step": purge_step,
                "max_queue": max_queue,
                "flush_secs": flush_secs,
                "filename_suffix": filename_suffix,
                "comet_config": comet_config,
            }
            self._tee = written_through.open_writer(backend, log_dir, settings)
            self._backend = backend
            written_through.wrap_instance(self)
            self._dir_ready = True

    # -- TensorBoard's attributes ------------------------------------------------------------
    @property
    def log_dir(self) -> str | os.PathLike[str]:
        """The run's directory, as given (made if it is not there yet)."""
        self._ensure_dir()
        return self._log_dir

    @property
    def logdir(self) -> str | os.PathLike[str]:
        """tensorboardX's name for ``log_dir``."""
        return self.log_dir

    def _ensure_dir(self) -> None:
        if not self._dir_ready and not self._off:
            os.makedirs(self._log_dir, exist_ok=True)  # raises as TensorBoard's writer would
            self._dir_ready = True

    @property
    def default_bins(self) -> list[float]:
        """TensorBoard's histogram bucket edges (``bins="tensorflow"``)."""
        edges, v = [], 1e-12
        while v < 1e20:
            edges.append(v)
            v *= 1.1
        return [-x for x in reversed(edges)] + [0.0] + edges

    def get_logdir(self) -> str | os.PathLike[str]:
        """The run's directory, made if needed (files saved there stay; the store keeps none)."""
        return self.log_dir

    @property
    def file_writer(self) -> FileWriter | None:
        """The run's :class:`.file_writer.FileWriter`; None after :meth:`close`, as torch's."""
        return None if self._closed else self._get_file_writer()

    @property
    def all_writers(self) -> dict[str, FileWriter] | None:
        """The file writers of the run and of its ``add_scalars`` sub-runs, by directory."""
        if self._closed:
            return None
        main = self._get_file_writer()
        out = {str(main.get_logdir()): main}
        tees = getattr(self._tee, "all_writers", None) or {}
        for key, run in self._scalar_runs.values():
            out[key] = FileWriter(_Sink(self), run, key, tees.get(key))
        return out

    def _get_file_writer(self) -> FileWriter:
        """The run's file writer, reopened after :meth:`close` (torch's and tensorboardX's name)."""
        self._reopen()
        if self._file_writer is None:
            tee = None if self._tee is None else self._tee._get_file_writer()
            self._file_writer = FileWriter(_Sink(self), self._run, str(self.log_dir), tee)
        return self._file_writer

    def _reopen(self) -> None:
        if self._closed:
            self._closed = False
            self._dir_ready = self._tee is not None  # made again if it was removed meanwhile

    # -- attaching to evaluations ------------------------------------------------------------
    def _target(self) -> _Target:
        target = self._cache
        if target is None or target.key is not current_evaluation.get() or target.journal.sealed:
            target = self._attach()
        return target

    def _attach(self) -> _Target:
        self._reopen()
        if not self._dir_ready:
            try:
                self._ensure_dir()
            except OSError as exc:
                # The points still reach the store; only files saved there would fail.
                self._failed("creating log_dir", exc)
                self._dir_ready = True
        key = current_evaluation.get()
        ctx = key
        if ctx is None:
            if self._own is None:
                self._own = standalone.new_run()
            ctx = self._own
        slot = (_TARGETS, self._token)
        target = ctx.state.get(slot)
        if target is None or target.journal.sealed:
            purge = self.purge_step if self._purge_pending else None
            target = ctx.state[slot] = _Target(key, ctx, journal_for(ctx), self._run, purge)
            if purge is not None:
                self._purge(target)
        target.key = key
        self._cache = target
        return target

    def _purge(self, target: _Target) -> None:
        # The run's points logged into this evaluation before this writer opened
        # it, at or after purge_step, are dropped when the logs are sealed.
        self._purge_pending = False
        names = target.registry.names_of(self._run.name)
        counts = runs.logged_counts(target.journal, names) if names else {}
        event = runs.purge_event(self._run, int(self.purge_step or 0), counts, names)
        target.journal.add_event(event)

    # -- what the other parts use ----------------------------------------------------------------
    def _journal(self) -> _View:
        """The journal of the evaluation running now, as this writer's run sees it."""
        return self._target().main

    def _objects(self) -> Any:
        return self._target().ctx.store.objects

    def _failed(self, method: str, exc: Exception) -> None:
        warn_once(
            (method, type(exc), str(exc)[:60]),
            f"{method} dropped a point ({type(exc).__name__}: {exc})",
        )

    def _unsupported(self, name: str) -> None:
        warn_once(("unsupported", name), f"{name} is not supported; its data is not recorded")

    def _keep(self, *args: Any, **kwargs: Any) -> None:
        if not self._off:
            super()._keep(*args, **kwargs)

    def _scalar_style(self, tag: str, double_precision: bool) -> None:
        if not self._off:
            super()._scalar_style(tag, double_precision)

    def _resolve_step(self, step: Any) -> int:
        if step is None and self._metadata is not None and self._metadata[0] is not None:
            step = self._metadata[0]
        return checked_step(step)

    def _resolve_wall(self, walltime: Any) -> float:
        if walltime is None and self._metadata is not None:
            walltime = self._metadata[1]
        return wall_time(walltime)

    def _put_scalar(self, run: runs.Run, tag: str, value: float, step: int, wall: float) -> None:
        if self._off:
            return
        try:
            self._target().view(run).add_scalar(tag, step, value, wall)
        except Exception as exc:
            self._failed("add_scalar", exc)

    def _put_event(self, run: runs.Run, event: dict[str, Any], step: int, wall: float) -> None:
        if self._off:
            return
        try:
            event["step"], event["wall"] = step, wall
            self._target().view(run).add_event(event)
        except Exception as exc:
            self._failed(f"add_{event.get('kind')}", exc)

    def _keep_in(
        self,
        run: runs.Run,
        method: str,
        event: dict[str, Any],
        step: Any,
        walltime: Any,
        blobs: Mapping[str, bytes | None],
    ) -> None:
        """Store *blobs* (their ids become the event's fields) and journal *event* in *run*."""
        if self._off:
            return
        try:
            target = self._target()
            for field, data in blobs.items():
                event[field] = None if data is None else target.ctx.store.objects.add_bytes(data)
            event["step"], event["wall"] = self._resolve_step(step), self._resolve_wall(walltime)
            target.view(run).add_event(event)
        except Exception as exc:
            self._failed(method, exc)

    def _put_session(
        self,
        run: runs.Run,
        hparams: Mapping[str, Any],
        metrics: list[str],
        domains: Mapping[str, list[Any]],
        step: int,
        wall: float,
        values: Mapping[str, float] | None = None,
    ) -> None:
        """Record one hyper-parameter session of *run* (and its metrics' *values*, if given)."""
        if self._off:
            return
        try:
            target = self._target()
            view = target.view(run)
            names = [view.name(m) for m in metrics]
            for name, metric in zip(names, metrics, strict=True):
                if values is not None:
                    target.journal.add_scalar(name, step, values[metric], wall)
            safe = {str(k): json_safe(v) for k, v in hparams.items()}
            event = {
                "kind": "hparams",
                "hparams": safe,
                "metrics": names,
                "tb_metrics": list(metrics),
                "domains": {str(k): [json_safe(x) for x in v] for k, v in domains.items()},
                "run": run.name,
                "step": step,
                "wall": wall,
            }
            target.journal.add_event(event)
            for key, value in safe.items():
                target.ctx.hparams.setdefault(key, value)
        except Exception as exc:
            self._failed("add_hparams", exc)

    def _flush_journal(self) -> None:
        target = self._cache
        if target is not None and not target.journal.sealed:
            try:
                target.journal.flush()
            except Exception as exc:
                self._failed("flush", exc)

    @contextlib.contextmanager
    def use_metadata(
        self, *, global_step: int | None = None, walltime: float | None = None
    ) -> Iterator[WriterBase]:
        """tensorboardX's defaults for the step and wall time of the points logged inside."""
        if self._metadata is not None:
            raise AssertionError("Default metadata is already set.")
        if global_step is None and walltime is None:
            raise AssertionError("At least one of `global_step` or `walltime` must be provided.")
        inner = getattr(self._tee, "use_metadata", None)
        self._metadata = (global_step, walltime)
        try:
            with (
                inner(global_step=global_step, walltime=walltime)
                if inner
                else contextlib.nullcontext()
            ):
                yield self
        finally:
            self._metadata = None

    def __getattr__(self, name: str) -> Any:
        # add_* methods this writer does not have (TensorBoard's later ones, tensorboardX's
        # add_openvino_graph): passed to the event-file writer if any, else warned about.
        if not name.startswith("add_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        tee = self.__dict__.get("_tee")
        original = getattr(tee, name, None)

        def not_stored(*args: Any, **kwargs: Any) -> None:
            self._unsupported(f"SummaryWriter.{name}")
            if original is not None:
                original(*args, **kwargs)

        return not_stored

    # -- life cycle --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Append buffered points to the journal (they then survive a crash)."""
        if self._tee is not None:
            self._tee.flush()
        self._flush_journal()

    def close(self) -> None:
        """Flush and close; a standalone run is recorded now. The writer may be used again.

        After ``close`` the writer's ``file_writer`` is None, as torch's; a later
        point reopens it (outside a memoised call: in a new run evaluation).
        """
        if self._tee is not None:
            self._tee.close()
        if self._closed:
            return
        self._closed = True
        self._flush_journal()
        own, self._own = self._own, None
        self._cache = None
        self._file_writer = None
        if own is not None:
            try:
                standalone.finish_own_run(own)
            except Exception as exc:
                self._failed("close", exc)

    def __enter__(self) -> WriterBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Sink:
    """A writer's point-writing methods, as its file writers call them (``file_writer.RunSink``).

    Public names here, private ones on the writer: a ``SummaryWriter``'s own
    attributes stay those of torch's writer.
    """

    def __init__(self, writer: WriterBase) -> None:
        w = writer
        self.keep_in = w._keep_in
        self.put_scalar = w._put_scalar
        self.put_event = w._put_event
        self.put_session = w._put_session
        self.resolve_step = w._resolve_step
        self.resolve_wall = w._resolve_wall
        self.flush_journal = w._flush_journal
        self.failed = w._failed
        self.unsupported = w._unsupported
        self.use_metadata = w.use_metadata
