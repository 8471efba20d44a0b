"""``SummaryWriter``: TensorBoard's writer (torch's and tensorboardX's), writing into the store.

Every point goes to the evaluation the caller runs inside *at the moment it is
logged*: the innermost memoised call, else the writer's own standalone run
evaluation (one per writer, recorded when it is closed or at exit). So a
writer made outside a memoised function and passed in (``@memo(ignore=
("writer",))``) logs into that call's evaluation, and nested memoised calls get
their own logs. Inside an evaluation each writer is its own *run*, as in
TensorBoard (:mod:`.runs`).

Input that TensorBoard's writers refuse raises what they raise
(:mod:`.inputs`); a failure of memostore itself to store a point (a full disk,
a finished evaluation) never does: the point is dropped with one
:class:`MemostoreWarning` naming the reason.

The class is assembled from three parts: :class:`.writer_base.WriterBase`
(constructor, runs, evaluations, life cycle), the ``add_*`` methods for
scalars, histograms, images, text and hyper-parameters here, and the other
``add_*`` methods in :class:`.media.MediaMethods`; :mod:`.event_files` then
wraps every ``add_*`` method so that it also writes event files when asked.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from ..records.context import current_evaluation
from . import convert, inputs, runs
from .media import MediaMethods
from .writer_base import WriterBase, default_log_dir


class SummaryWriter(WriterBase, MediaMethods):
    """Drop-in for ``torch.utils.tensorboard.SummaryWriter`` and tensorboardX's, into the store.

    Takes the arguments of both (``log_dir`` or ``logdir``, ``comment``,
    ``purge_step``, ``max_queue``, ``flush_secs``, ``filename_suffix``,
    ``write_to_disk``, ``comet_config``). ``log_dir`` (TensorBoard's default
    ``runs/<date>_<host><comment>``) is created, as TensorBoard creates it,
    and names the writer's run; the points go to the store, and event files
    are written there only with ``event_files=True`` (:mod:`.event_files`).
    ``write_to_disk=False`` makes a writer that records nothing (tensorboardX's).
    In a torch.distributed job only rank 0's writers record, as TensorBoard
    users expect; ``all_ranks=True`` makes every rank's writer record, rank
    *r* > 0 into the run ``<log_dir>/rank<r>`` (``docs/clusters.md``).

    Example:
        >>> from memostore import SummaryWriter   # was: from torch.utils.tensorboard import ...
        >>> writer = SummaryWriter()
        >>> writer.add_scalar("loss", 0.25, global_step=10)
    """

    # -- scalars ---------------------------------------------------------------------------
    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
        display_name: str = "",
        summary_description: str = "",
    ) -> None:
        """Log one number (kept as float64, bit for bit) at *global_step*.

        ``new_style``/``double_precision`` choose how ``export tensorboard``
        writes the tag; tensorboardX's ``display_name`` and
        ``summary_description`` are accepted and not stored.
        """
        value = scalar_value if type(scalar_value) is float else inputs.scalar(scalar_value)
        if type(tag) is not str:
            tag = inputs.tag(tag)
        step = global_step if type(global_step) is int else self._resolve_step(global_step)
        if walltime is None and self._metadata is None:
            wall = time.time()
        else:
            wall = self._resolve_wall(walltime)
        # The hot path: one cache check and one dict lookup before the journal's append.
        try:
            target = self._cache
            if (
                target is None
                or target.key is not current_evaluation.get()
                or target.journal.sealed
            ):
                if self._off:
                    return
                target = self._attach()
            name = target.names.get(tag)
            if name is None:
                name = target.main.name(tag)
            target.journal.add_scalar(name, step, value, wall)
        except Exception as exc:
            self._failed("add_scalar", exc)
            return
        if new_style:
            self._scalar_style(tag, double_precision)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log several numbers, named ``main_tag/key``; exported as torch's sub-runs.

        torch's writer puts each key in a run ``<log_dir>/<main_tag>_<key>``
        (``/`` in the main tag becomes ``_``) under the tag ``main_tag``, so
        TensorBoard draws them as the lines of one chart.
        """
        main = inputs.tag(main_tag)
        values = [(inputs.tag(k), inputs.scalar(v)) for k, v in tag_scalar_dict.items()]
        step, wall = self._resolve_step(global_step), self._resolve_wall(walltime)
        if self._off:
            return
        try:
            target = self._target()
            for key, value in values:
                run = self._scalars_run(main, key)
                name = target.view(run).name(main, f"{main}/{key}", self._run)
                target.journal.add_scalar(name, step, value, wall)
        except Exception as exc:
            self._failed("add_scalars", exc)

    def _scalars_run(self, main: str, key: str) -> runs.Run:
        known = self._scalar_runs.get((main, key))
        if known is None:
            sub = main.replace("/", "_") + "_" + key
            path = str(self._log_dir) + "/" + sub  # torch's file writer key
            known = self._scalar_runs[(main, key)] = (path, self._run.child(sub, "scalars"))
        return known[1]

    def export_scalars_to_json(self, path: str | os.PathLike[str]) -> None:
        """Write the ``add_scalars`` points logged since the last export, as tensorboardX does.

        The file is ``{"<log_dir>/<main_tag>/<key>": [[wall, step, value], ...]}``,
        read from the current evaluation's journal (nothing is kept in memory).
        """
        out: dict[str, list[list[float]]] = {}
        target = self._cache
        if target is not None and not target.journal.sealed and self._scalar_runs:
            target.journal.flush()
            contents = runs.journal_contents(target.journal)
            for (main, key), (_, run) in self._scalar_runs.items():
                view = target.views.get(run.name)
                name = None if view is None else view._names.get(main)
                if name is None or name not in contents.scalars:
                    continue
                rows = _rows(contents.scalars[name])
                done = self._exported.get(name, 0)
                self._exported[name] = len(rows)
                out[os.path.join(str(self._log_dir), main, key)] = rows[done:]
        with open(path, "w") as f:
            json.dump(out, f)

    # -- histograms, images, text --------------------------------------------------------------
    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """Log the statistics and bucket counts of *values* (TensorBoard's buckets by default)."""
        tag = inputs.tag(tag)
        event = convert.histogram(inputs.histogram_values(values), inputs.bins(bins), max_bins)
        event.update(kind="histogram", tag=tag)
        self._put_event(
            self._run, event, self._resolve_step(global_step), self._resolve_wall(walltime)
        )

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
        inputs.histogram_raw(bucket_limits, bucket_counts)
        event = {
            "kind": "histogram",
            "tag": inputs.tag(tag),
            "min": float(min),
            "max": float(max),
            "num": float(num),
            "sum": float(sum),
            "sum_squares": float(sum_squares),
            "limits": [float(x) for x in inputs.array(bucket_limits).reshape(-1)],
            "counts": [float(x) for x in inputs.array(bucket_counts).reshape(-1)],
        }
        self._put_event(
            self._run, event, self._resolve_step(global_step), self._resolve_wall(walltime)
        )

    def _put_png(self, method: str, tag: str, png: bytes, step: Any, walltime: Any) -> None:
        height, width, channels = convert.png_size(png)
        event = {
            "kind": "image",
            "tag": tag,
            "height": height,
            "width": width,
            "channels": channels,
        }
        self._keep_in(self._run, method, event, step, walltime, {"blob": png})

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """Log an image (float pixels in [0, 1] or uint8), stored as a PNG blob."""
        tag = inputs.tag(tag)
        pixels = convert.image_pixels(inputs.image(img_tensor, dataformats), dataformats)
        self._put_png("add_image", tag, convert.encode_png(pixels), global_step, walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """Log a batch of images (or a list of them), tiled into one PNG as TensorBoard does."""
        tag = inputs.tag(tag)
        data, dataformats = inputs.image_batch(img_tensor, dataformats)
        pixels = convert.image_pixels(data, dataformats)
        self._put_png("add_images", tag, convert.encode_png(pixels), global_step, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """Log a matplotlib figure (or a list of them) as a PNG image."""
        tag = inputs.tag(tag)
        inputs.figure(figure)
        png = convert.figure_png(figure, close)
        self._put_png("add_figure", tag, png, global_step, walltime)

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a piece of text (markdown in TensorBoard)."""
        event = {"kind": "text", "tag": inputs.tag(tag), "text": inputs.text(text_string)}
        self._put_event(
            self._run, event, self._resolve_step(global_step), self._resolve_wall(walltime)
        )

    # -- hyper-parameters ------------------------------------------------------------------------
    def add_hparams(
        self,
        hparam_dict: dict[str, Any],
        metric_dict: dict[str, Any],
        hparam_domain_discrete: Mapping[str, list[Any]] | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
        *,
        name: str | None = None,
    ) -> None:
        """Record one session of hyper-parameters and metrics, in a sub-run as torch does.

        The session is the run ``<log_dir>/<run_name>`` (default: the time),
        holding the metrics as scalars; the hyper-parameters also join the
        evaluation's own (a memoised call's scalar arguments keep precedence).
        tensorboardX's spelling ``add_hparams(h, m, name, global_step)`` works too.
        """
        if isinstance(hparam_domain_discrete, str):  # tensorboardX: (h, m, name, global_step)
            name, hparam_domain_discrete = hparam_domain_discrete, None
            if run_name is not None and not isinstance(run_name, str):
                global_step, run_name = run_name, None
        hparams, metrics = inputs.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        run_name = run_name or name or str(time.time())
        if self._tee is not None:
            if self._backend == "tensorboardx":
                self._tee.add_hparams(
                    hparam_dict, metric_dict, name=run_name, global_step=global_step
                )
            else:
                self._tee.add_hparams(
                    hparam_dict, metric_dict, hparam_domain_discrete, run_name, global_step
                )
        domains = dict(hparam_domain_discrete or {})
        step, wall = self._resolve_step(global_step), time.time()
        session = self._run.child(run_name, "hparams")
        self._put_session(session, hparams, list(metrics), domains, step, wall, metrics)


def _rows(batches: list[tuple[bytes, bytes, bytes]]) -> list[list[float]]:
    import numpy as np

    steps = np.frombuffer(b"".join(s for s, _, _ in batches), dtype="<i8").tolist()
    values = np.frombuffer(b"".join(v for _, v, _ in batches), dtype="<f8").tolist()
    walls = np.frombuffer(b"".join(w for _, _, w in batches), dtype="<f8").tolist()
    return [[w, s, v] for s, v, w in zip(steps, values, walls, strict=True)]


__all__ = ["SummaryWriter", "default_log_dir"]
