"""Metric logging: speed against TensorBoard's writer, size in the store, plot time.

Run: ``python benchmarks/bench_logging.py [--points 100000] [--repeat 5]``.
Prints medians over the repeats and the ratios the project holds itself to:

* ``add_scalar`` x N inside a memoised call, sealing included, at most 0.1x the
  time of ``torch.utils.tensorboard.SummaryWriter`` doing the same (closing it);
* N scalars of one tag occupy at most 1 MB in the store;
* ``memostore plot`` of 1,000,000 points renders in under 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import result


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_torch(values: list[float], repeat: int, workdir: Path) -> tuple[float, int]:
    from torch.utils.tensorboard import SummaryWriter

    runs = iter(range(10**6))
    sizes = []

    def once() -> None:
        logdir = workdir / f"tb{next(runs)}"
        writer = SummaryWriter(str(logdir))
        for i, v in enumerate(values):
            writer.add_scalar("loss", v, i)
        writer.close()
        sizes.append(sum(f.stat().st_size for f in logdir.iterdir()))

    return _median_time(once, repeat), sizes[-1]


def bench_memostore(values: list[float], repeat: int) -> tuple[float, float, int]:
    from memostore import Store, memo
    from memostore.tensorboard import SummaryWriter

    @memo
    def train(run: int, n: int) -> int:
        writer = SummaryWriter()
        for i in range(n):
            writer.add_scalar("loss", values[i], i)
        return run

    runs = iter(range(10**6))
    n = len(values)
    logging = _median_time(lambda: train(next(runs), n), repeat)
    baseline = _median_time(lambda: train(next(runs), 0), repeat)  # the call without logging
    store = Store.default()
    logs_id = train.lookup(0, n).logs_id
    doc = store.objects.get_doc(logs_id)
    size = store.objects.size_of(logs_id) + sum(store.objects.size_of(b) for b in doc.links.blobs)
    return logging, baseline, size


def bench_plot(points: int, repeat: int) -> float:
    import click
    from click.testing import CliRunner
    from memostore_cli.metrics_cmds import register

    from memostore import Store
    from memostore.evaluation import evaluation_doc
    from memostore.metrics.journal import Contents
    from memostore.metrics.seal import seal
    from memostore.objects import Links

    rng = np.random.default_rng(0)
    values = np.exp(-np.arange(points) / (points / 3)) + 0.01 * rng.standard_normal(points)
    batch = (
        np.arange(points, dtype="<i8").tobytes(),
        values.astype("<f8").tobytes(),
        (time.time() + np.arange(points) * 1e-3).tobytes(),
    )
    store = Store.default()
    logs_id = seal(store.objects, Contents(header={}, scalars={"loss": [batch]}))
    doc = evaluation_doc({"function": "bench:plot", "status": "ok", "logs": logs_id}, Links())
    store.objects.add_doc(doc)
    group = click.Group("memostore")
    register(group)
    runner = CliRunner()

    def once() -> None:
        result = runner.invoke(group, ["plot", doc.id, "--tag", "loss", "--width", "120"])
        assert result.exit_code == 0, result.output

    return _median_time(once, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plot-points", type=int, default=1_000_000)
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    values = rng.random(args.points).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MEMOSTORE_DIR"] = str(Path(tmp) / "store")
        ms_total, ms_base, ms_size = bench_memostore(values, args.repeat)
        ms = ms_total - ms_base
        plot_s = bench_plot(args.plot_points, args.repeat)
        n = args.points
        print(
            f"memostore add_scalar x{n} in a memoised call: {ms:.3f} s "
            f"({ms / n * 1e6:.2f} us/call; whole call {ms_total:.3f} s, empty call {ms_base:.3f} s)"
        )
        print(f"memostore store size for {n} scalars: {ms_size / 1e6:.3f} MB (limit 1 MB)")
        print(f"memostore plot of {args.plot_points} points: {plot_s:.3f} s (limit 1 s)")
        tb = tb_size = None
        tb_repeat = max(1, min(args.repeat, 3))
        if not args.skip_torch:
            tb, tb_size = bench_torch(values, tb_repeat, Path(tmp))
            print(
                f"torch SummaryWriter add_scalar x{n}: {tb:.3f} s ({tb / n * 1e6:.2f} us/call), "
                f"event file {tb_size / 1e6:.3f} MB"
            )
            print(f"ratio memostore / torch time: {ms / tb:.3f} (limit 0.1)")
            print(f"ratio memostore / torch size: {ms_size / tb_size:.3f}")
    result(
        "logging.add_scalar",
        f"{n:,} add_scalar calls inside a memoised call (sealing included)",
        ours=ms,
        baseline=tb,
        baseline_name="torch.utils.tensorboard.SummaryWriter",
        kind="max",
        limit=0.1,
        note=f"medians of {args.repeat} (torch's: of {tb_repeat}); "
        "the same memoised call without logging subtracted",
    )
    result(
        "logging.size",
        f"Store size of {n:,} scalars of one tag",
        ours=ms_size / 1e6,
        baseline=None if tb_size is None else tb_size / 1e6,
        baseline_name="TensorBoard's event file",
        unit="MB",
        kind="below",
        limit=1,
    )
    result(
        "logging.plot",
        f"memostore plot of {args.plot_points:,} points",
        ours=plot_s,
        kind="below",
        limit=1,
        note=f"median of {args.repeat}, in process (click's runner)",
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
