"""``SummaryWriter`` (TensorBoard's interface) and ``log``, writing into the store.

Every point goes to the evaluation the caller runs inside *at the moment it is
logged*: the innermost memoised call, else the script's standalone run. So a
writer made outside a memoised function and passed in (``@memo(ignore=
("writer",))``) logs into that call's evaluation, and nested memoised calls get
their own logs. No method raises: a point that cannot be logged is dropped
with a :class:`MemostoreWarning` naming the reason.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .. import context
from ..errors import MemostoreError, MemostoreWarning
from . import convert
from .journal import Journal, describe_process
from .seal import json_safe, seal

_STATE_KEY = "memostore.metrics.journal"
_attach_lock = threading.Lock()
_recovered: set[str] = set()
_warned: set[Any] = set()
_current = context._current  # read on every point: a ContextVar.get, no call overhead


def _warn_once(key: Any, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"memostore: {message}", MemostoreWarning, stacklevel=4)


# -- attaching to evaluations ---------------------------------------------------------------
def journal_for(ctx: context.EvalContext) -> Journal:
    """The journal of *ctx*, opened (and its sealing scheduled) on first use."""
    journal = ctx.state.get(_STATE_KEY)
    if journal is None:
        with _attach_lock:
            journal = ctx.state.get(_STATE_KEY)
            if journal is None:
                journal = _open_journal(ctx)
                ctx.state[_STATE_KEY] = journal
                ctx.add_finalizer(_finalize)
    if journal.sealed:
        raise MemostoreError(f"the evaluation of {ctx.function} has already finished")
    return journal


def _open_journal(ctx: context.EvalContext) -> Journal:
    directory = None
    if ctx.store.root is not None:
        directory = ctx.store.subdir("journal")
        root = str(ctx.store.root)
        if root not in _recovered:
            _recovered.add(root)
            from .recover import recover_orphans

            recover_orphans(ctx.store)
    header = {
        "format": 1,
        "function": ctx.function,
        "key": ctx.key,
        "run_id": ctx.run_id,
        "started": ctx.started,
        "hparams": {k: json_safe(v) for k, v in ctx.hparams.items()},
        "process": describe_process(),
    }
    return Journal(directory, header)


def _finalize(ctx: context.EvalContext, status: str) -> dict[str, Any]:
    journal: Journal | None = ctx.state.get(_STATE_KEY)
    if journal is None or journal.sealed:
        return {}
    contents = journal.finish()
    logs_id = seal(ctx.store.objects, contents)
    # Removed only once the chunks are stored: until then a crash leaves the
    # journal for recovery.
    journal.discard()
    if logs_id is None:
        return {}
    ctx.links.docs.add(logs_id)
    return {"logs": logs_id}


def _wall(walltime: Any) -> float:
    return time.time() if walltime is None else float(walltime)


def _step(step: Any) -> int:
    # TensorBoard records a missing step as 0.
    if step is None:
        return 0
    step = int(step)
    if not -(1 << 63) <= step < (1 << 63):
        raise ValueError(f"step {step} does not fit in 64 bits")
    return step


# -- SummaryWriter --------------------------------------------------------------------------
class SummaryWriter:
    """Drop-in for ``torch.utils.tensorboard.SummaryWriter`` that logs into the store.

    The constructor takes the same arguments as TensorBoard's and ignores them
    (nothing is written to ``log_dir``); use ``memostore export tensorboard``
    to get event files. Fully supported: ``add_scalar``, ``add_scalars``,
    ``add_histogram``, ``add_histogram_raw``, ``add_image``, ``add_images``,
    ``add_figure``, ``add_text``, ``add_hparams``, ``flush``, ``close``, and use
    as a context manager. Other ``add_*`` methods warn once and do nothing.

    Example:
        >>> from memostore import SummaryWriter   # was: from torch.utils.tensorboard import ...
        >>> writer = SummaryWriter()
        >>> writer.add_scalar("loss", 0.25, global_step=10)
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: int = 120,
        filename_suffix: str = "",
    ) -> None:
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self._cache: tuple[Any, Journal] | None = None

    def get_logdir(self) -> str:
        """The ``log_dir`` given (or TensorBoard's default name); nothing is written there."""
        return self.log_dir

    def _journal(self) -> Journal:
        ctx = _current.get()
        cache = self._cache
        if cache is not None and cache[0] is ctx and not cache[1].sealed:
            return cache[1]
        journal = journal_for(ctx or context.current_or_run())
        self._cache = (ctx, journal)
        return journal

    def _failed(self, method: str, exc: Exception) -> None:
        _warn_once(
            (method, type(exc), str(exc)[:60]),
            f"{method} dropped a point ({type(exc).__name__}: {exc})",
        )

    # -- scalars ---------------------------------------------------------------------------
    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """Log one number (kept as float64, bit for bit) at *global_step*."""
        try:
            value = scalar_value if type(scalar_value) is float else convert.to_float(scalar_value)
            step = global_step if type(global_step) is int else _step(global_step)
            wall = time.time() if walltime is None else float(walltime)
            self._journal().add_scalar(tag if type(tag) is str else str(tag), step, value, wall)
        except Exception as exc:
            self._failed("add_scalar", exc)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log several numbers as tags ``main_tag/key``, all in this evaluation."""
        try:
            step = _step(global_step)
            wall = _wall(walltime)
            journal = self._journal()
            for key, value in tag_scalar_dict.items():
                journal.add_scalar(f"{main_tag}/{key}", step, convert.to_float(value), wall)
        except Exception as exc:
            self._failed("add_scalars", exc)

    # -- other kinds ---------------------------------------------------------------------------
    def _event(self, method: str, event: dict[str, Any], step: Any, walltime: Any) -> None:
        event["step"] = _step(step)
        event["wall"] = _wall(walltime)
        self._journal().add_event(event)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """Log the statistics and bucket counts of *values* (TensorBoard's buckets)."""
        try:
            event = {"kind": "histogram", "tag": str(tag)}
            event.update(convert.histogram(values, bins, max_bins))
            self._event("add_histogram", event, global_step, walltime)
        except Exception as exc:
            self._failed("add_histogram", exc)

    def add_histogram_raw(
        self,
        tag: str,
        min: float,
        max: float,
        num: float,
        sum: float,
        sum_squares: float,
        bucket_limits: Any,
        bucket_counts: Any,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a histogram already bucketed by the caller."""
        try:
            limits = [float(x) for x in convert.to_numpy(bucket_limits).reshape(-1)]
            counts = [float(x) for x in convert.to_numpy(bucket_counts).reshape(-1)]
            if len(limits) != len(counts):
                raise ValueError("bucket_limits and bucket_counts differ in length")
            event = {
                "kind": "histogram",
                "tag": str(tag),
                "min": float(min),
                "max": float(max),
                "num": float(num),
                "sum": float(sum),
                "sum_squares": float(sum_squares),
                "limits": limits,
                "counts": counts,
            }
            self._event("add_histogram_raw", event, global_step, walltime)
        except Exception as exc:
            self._failed("add_histogram_raw", exc)

    def _add_png(self, method: str, tag: str, png: bytes, step: Any, walltime: Any) -> None:
        journal = self._journal()
        ctx = _current.get() or context.current_or_run()
        height, width, channels = convert.png_size(png)
        blob = ctx.store.objects.add_bytes(png)
        event = {
            "kind": "image",
            "tag": str(tag),
            "blob": blob,
            "height": height,
            "width": width,
            "channels": channels,
            "step": _step(step),
            "wall": _wall(walltime),
        }
        journal.add_event(event)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """Log an image (float pixels in [0, 1] or uint8), stored as a PNG blob."""
        try:
            png = convert.encode_png(convert.image_pixels(img_tensor, dataformats))
            self._add_png("add_image", tag, png, global_step, walltime)
        except Exception as exc:
            self._failed("add_image", exc)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """Log a batch of images, tiled into one PNG as TensorBoard does."""
        try:
            png = convert.encode_png(convert.grid_pixels(img_tensor, dataformats))
            self._add_png("add_images", tag, png, global_step, walltime)
        except Exception as exc:
            self._failed("add_images", exc)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """Log a matplotlib figure (or a list of them) as a PNG image."""
        try:
            png = convert.figure_png(figure, close)
            self._add_png("add_figure", tag, png, global_step, walltime)
        except Exception as exc:
            self._failed("add_figure", exc)

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a piece of text (markdown in TensorBoard)."""
        try:
            event = {"kind": "text", "tag": str(tag), "text": str(text_string)}
            self._event("add_text", event, global_step, walltime)
        except Exception as exc:
            self._failed("add_text", exc)

    def add_hparams(
        self,
        hparam_dict: Mapping[str, Any],
        metric_dict: Mapping[str, Any],
        hparam_domain_discrete: Mapping[str, list[Any]] | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """Record hyper-parameters and their metrics in this evaluation (no sub-run).

        The metrics are logged as scalars; the hyper-parameters join the
        evaluation's own (a memoised call's scalar arguments keep precedence).
        """
        try:
            journal = self._journal()
            ctx = _current.get() or context.current_or_run()
            hparams = {str(k): json_safe(v) for k, v in hparam_dict.items()}
            step, wall = _step(global_step), time.time()
            for key, value in metric_dict.items():
                journal.add_scalar(str(key), step, convert.to_float(value), wall)
            domains = {
                str(k): [json_safe(x) for x in v] for k, v in (hparam_domain_discrete or {}).items()
            }
            journal.add_event(
                {
                    "kind": "hparams",
                    "hparams": hparams,
                    "metrics": [str(k) for k in metric_dict],
                    "domains": domains,
                    "step": step,
                    "wall": wall,
                }
            )
            for key, value in hparams.items():
                ctx.hparams.setdefault(key, value)
        except Exception as exc:
            self._failed("add_hparams", exc)

    # -- unsupported -----------------------------------------------------------------------------
    def _unsupported(self, name: str) -> None:
        _warn_once(
            ("unsupported", name),
            f"SummaryWriter.{name} is not supported; its data is not recorded "
            "(supported: add_scalar(s), add_histogram, add_image(s), add_figure, "
            "add_text, add_hparams)",
        )

    def add_audio(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_audio")

    def add_video(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_video")

    def add_graph(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_graph")

    def add_onnx_graph(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_onnx_graph")

    def add_embedding(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_embedding")

    def add_pr_curve(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_pr_curve")

    def add_pr_curve_raw(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_pr_curve_raw")

    def add_mesh(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_mesh")

    def add_image_with_boxes(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_image_with_boxes")

    def add_custom_scalars(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_custom_scalars")

    def add_custom_scalars_multilinechart(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_custom_scalars_multilinechart")

    def add_custom_scalars_marginchart(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: warns once, records nothing."""
        self._unsupported("add_custom_scalars_marginchart")

    def __getattr__(self, name: str) -> Any:
        # Methods TensorBoard may add later: accepted and ignored, never an AttributeError.
        if name.startswith("add_"):

            def ignored(*args: Any, **kwargs: Any) -> None:
                self._unsupported(name)

            return ignored
        raise AttributeError(name)

    # -- lifecycle ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Append buffered points to the journal (they then survive a crash)."""
        try:
            cache = self._cache
            if cache is not None and not cache[1].sealed:
                cache[1].flush()
        except Exception as exc:
            self._failed("flush", exc)

    def close(self) -> None:
        """Flush. The writer stays usable; the logs are sealed when the evaluation ends."""
        self.flush()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SummaryWriter", "journal_for"]
