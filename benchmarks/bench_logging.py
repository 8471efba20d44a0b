"""Metric logging: speed against TensorBoard's writer, size in the store, plot time.

Run: ``python benchmarks/bench_logging.py [--points 100000] [--repeat 5]``;
``--open-close 1000`` times only 1,000 short runs, a writer opened and closed per run.
Prints medians over the repeats and the ratios the project holds itself to:

* ``add_scalar`` x N inside a memoised call, sealing included, at most 0.1x the
  time of ``torch.utils.tensorboard.SummaryWriter`` doing the same (closing it);
* N scalars of one tag occupy at most 1 MB in the store;
* ``memostore plot`` of 1,000,000 points renders in under 1 s;
* live: the same N ``add_scalar`` calls, spread over bursts of training with the
  timer flushing the journal and another process following it, still at most
  0.1x torch's writer, and under 1 MB in the store;
* live: from ``add_scalar`` in one process to the point visible in
  ``memostore show --json`` run from another, a median of at most 2 s
  (TensorBoard's UI reloads every 30 s by default);
* live: a follower's read of 1,000 new points costs the same on a journal of
  1,000,000 points as on an empty one (reads are incremental).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
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
    from memostore.metrics.journal import Contents
    from memostore.metrics.seal import seal
    from memostore.odb.objects import Links
    from memostore.records.evaluation import evaluation_doc

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


# -- live visibility -----------------------------------------------------------------------
FOLLOWER = """
import sys, time
from memostore.metrics import running_evaluations

deadline = time.monotonic() + float(sys.argv[1])
seen, polls, logs = 0, 0, None
while time.monotonic() < deadline:
    if logs is None:
        runs = [r for r in running_evaluations() if r.function.endswith("live_train")]
        logs = runs[0].logs() if runs else None
    if logs is not None:
        polls += 1
        seen += sum(logs.poll().values())
        if logs.ended:
            break
    time.sleep(0.2)
print(seen, polls)
"""


def _busy(seconds: float) -> None:
    # Pure-Python work that holds the GIL, as a training step's Python does: the
    # flush thread has to compete for it, so its cost shows in the timing.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def bench_live(values: list[float], repeat: int, bursts: int, pause: float) -> dict[str, float]:
    """N add_scalar calls in *bursts*, *pause* s of busy work between them, a follower reading.

    Returns the marginal seconds of logging (median), the store size of the
    sealed logs, and what the follower saw.
    """
    from memostore import Store, memo
    from memostore.tensorboard import SummaryWriter

    @memo
    def live_train(run: int, n: int, log: bool) -> int:
        writer = SummaryWriter()
        per = n // bursts
        i = 0
        for _ in range(bursts):
            if log:
                for _ in range(per):
                    writer.add_scalar("loss", values[i], i)
                    i += 1
            _busy(pause)
        return run

    runs = iter(range(10**6))
    n = len(values) - len(values) % bursts
    follower_s = bursts * pause + 30
    script = Path(tempfile.mkdtemp()) / "follower.py"
    script.write_text(FOLLOWER)
    marginal, seen = [], []
    for _ in range(repeat):
        follower = subprocess.Popen(
            [sys.executable, str(script), str(follower_s)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(1.0)  # the follower has started and looks for the run
        t0 = time.perf_counter()
        live_train(next(runs), n, True)
        logged = time.perf_counter() - t0
        out, _ = follower.communicate(timeout=follower_s + 30)
        seen.append(int(out.split()[0]))
        t0 = time.perf_counter()
        live_train(next(runs), n, False)
        marginal.append(logged - (time.perf_counter() - t0))
    store = Store.default()
    logs_id = live_train.lookup(0, n, True).logs_id
    doc = store.objects.get_doc(logs_id)
    size = store.objects.size_of(logs_id) + sum(store.objects.size_of(b) for b in doc.links.blobs)
    return {
        "seconds": statistics.median(marginal),
        "size": size,
        "seen": min(seen),
        "points": n,
    }


LOGGER = """
import sys, time
from memostore import memo
from memostore.tensorboard import SummaryWriter

@memo
def latency_train(points: int, every: float) -> int:
    writer = SummaryWriter()
    print("ready", flush=True)
    time.sleep(1.0)
    for i in range(points):
        writer.add_scalar("loss", 1.0 / (i + 1), i)  # never flushed by hand
        time.sleep(every)
    return points

latency_train(int(sys.argv[1]), float(sys.argv[2]))
"""


def _memostore_exe() -> str:
    exe = Path(sys.executable).with_name("memostore")
    return str(exe) if exe.exists() else (shutil.which("memostore") or "memostore")


def bench_latency(points: int, every: float) -> dict[str, float]:
    """From add_scalar in a child to visible in ``memostore show --json`` from other processes.

    ``show`` runs back to back in fresh processes while the child logs one
    point every *every* seconds. A point's latency runs from its wall time (taken
    in add_scalar) to the end of the first ``show`` whose count includes it.
    """
    from memostore import Store
    from memostore.metrics import load_series

    script = Path(tempfile.mkdtemp()) / "latency_train.py"
    script.write_text(LOGGER)
    child = subprocess.Popen(
        [sys.executable, str(script), str(points), str(every)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    seen: list[tuple[float, float, int]] = []  # (show started, show ended, count)
    ended = False
    while not ended:
        ended = child.poll() is not None  # one more show once it has ended: the last points
        start = time.time()
        proc = subprocess.run(
            [_memostore_exe(), "show", "latency_train", "--json"], capture_output=True, text=True
        )
        end = time.time()
        if proc.returncode == 0:
            record = json.loads(proc.stdout)
            count = (record.get("metrics") or {}).get("loss", {}).get("count", 0)
            seen.append((start, end, count if record.get("status") == "running" else points))
    child.wait()
    store = Store.default()
    [evaluation_id] = [eid for name, eid in store.iter_evaluation_refs() if "latency_train" in name]
    walls = load_series(store, store.evaluation(evaluation_id).body["logs"], "loss")[2].tolist()
    latencies, in_file = [], []
    for k, wall in enumerate(walls):
        for start, end, count in seen:
            if count > k and end >= wall:
                latencies.append(end - wall)
                in_file.append(max(0.0, start - wall))
                break
    runtimes = [end - start for start, end, _ in seen]
    return {
        "median": statistics.median(latencies),
        "max": max(latencies),
        "show_s": statistics.median(runtimes),
        "in_file_median": statistics.median(in_file),
        "points": len(latencies),
        "shows": len(seen),
    }


def bench_poll(points: int, new: int, repeat: int) -> tuple[float, float, float]:
    """Seconds of a follower's poll: 1,000 new points on an empty journal, on a long one,
    and a full re-read of the long one (what a reader without offsets does each time)."""
    from memostore.metrics.journal import Journal
    from memostore.metrics.live import LiveLogs

    directory = Path(tempfile.mkdtemp())

    def journal_with(run_id: str, n: int) -> Journal:
        journal = Journal(directory, {"run_id": run_id, "function": "bench:poll"})
        for i in range(n):
            journal.add_scalar("loss", i, float(i), 1.0)
        journal.flush()
        return journal

    def poll_new(journal: Journal, logs: LiveLogs) -> float:
        times = []
        for r in range(repeat):
            for i in range(new):
                journal.add_scalar("loss", r * new + i, 0.5, 2.0)
            journal.flush()
            t0 = time.perf_counter()
            logs.poll()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    short, long = journal_with("short", 0), journal_with("long", points)
    with LiveLogs(short.path) as a, LiveLogs(long.path) as b:
        a.poll()
        b.poll()
        on_short, on_long = poll_new(short, a), poll_new(long, b)

    def full() -> None:
        with LiveLogs(long.path) as c:
            c.poll()

    reread = _median_time(full, repeat)
    for journal in (short, long):
        journal.finish()
        journal.discard()
    return on_short, on_long, reread


def bench_open_close(runs: int, points: int, workdir: Path) -> tuple[float, float]:
    """Seconds to write *runs* short runs of *points* scalars, opening and closing a
    writer for each (memostore's outside a memoised call, each a run of the script;
    torch's, each an event file): (memostore, torch)."""
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    from memostore import SummaryWriter

    def write(make) -> float:
        t0 = time.perf_counter()
        for r in range(runs):
            writer = make(r)
            for i in range(points):
                writer.add_scalar("loss", 1.0 / (i + 1), i)
            writer.close()
        return time.perf_counter() - t0

    write(lambda r: SummaryWriter(str(workdir / f"warm{r}")))  # imports and first-use costs
    ours = write(lambda r: SummaryWriter(str(workdir / f"ms{r}")))
    torch = write(lambda r: TorchWriter(str(workdir / f"tb{r}")))
    return ours, torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plot-points", type=int, default=1_000_000)
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--bursts", type=int, default=10, help="live: bursts of add_scalar")
    parser.add_argument("--pause", type=float, default=0.4, help="live: busy seconds between")
    parser.add_argument("--latency-points", type=int, default=20)
    parser.add_argument("--latency-every", type=float, default=0.3)
    parser.add_argument(
        "--open-close",
        type=int,
        default=0,
        metavar="RUNS",
        help="only time RUNS short runs of 10 scalars, a writer opened and closed per run",
    )
    args = parser.parse_args()
    if args.open_close:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["MEMOSTORE_DIR"] = str(Path(tmp) / "store")
            ours, torch = bench_open_close(args.open_close, 10, Path(tmp))
        print(
            f"{args.open_close} runs of 10 scalars, a writer opened and closed per run: "
            f"memostore {ours:.2f} s, torch {torch:.2f} s, ratio {ours / torch:.2f} (limit 1)"
        )
        return

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
        live = bench_live(values, max(1, min(args.repeat, 3)), args.bursts, args.pause)
        print(
            f"memostore live add_scalar x{live['points']} in {args.bursts} bursts, "
            f"{args.pause} s of busy work between, a follower process reading: "
            f"{live['seconds']:.3f} s marginal; the follower saw {live['seen']} points; "
            f"sealed logs {live['size'] / 1e6:.3f} MB"
        )
        lat = bench_latency(args.latency_points, args.latency_every)
        print(
            f"memostore add_scalar -> visible in `show --json` from another process: median "
            f"{lat['median']:.2f} s, max {lat['max']:.2f} s over {lat['points']} points "
            f"({lat['shows']} show runs, each {lat['show_s']:.2f} s median; in the file after "
            f"{lat['in_file_median']:.2f} s median)"
        )
        on_short, on_long, reread = bench_poll(1_000_000, 1_000, args.repeat)
        print(
            f"memostore follower poll of 1,000 new points: {on_short * 1e3:.2f} ms on an empty "
            f"journal, {on_long * 1e3:.2f} ms on one of 1,000,000 points "
            f"(re-reading that one whole: {reread * 1e3:.1f} ms)"
        )
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
        "live.add_scalar",
        f"{live['points']:,} add_scalar calls inside a memoised call, live: {args.bursts} bursts "
        f"between busy work, the timer flushing and another process following",
        ours=live["seconds"],
        baseline=tb,
        baseline_name="torch.utils.tensorboard.SummaryWriter",
        kind="max",
        limit=0.1,
        note=f"median of {max(1, min(args.repeat, 3))} of (call with logging - the same call "
        f"without); the follower read {live['seen']:,} points while it ran",
    )
    result(
        "live.size",
        f"Store size of {live['points']:,} scalars logged live (many small journal batches)",
        ours=live["size"] / 1e6,
        baseline=None if tb_size is None else tb_size / 1e6,
        baseline_name="TensorBoard's event file",
        unit="MB",
        kind="below",
        limit=1,
    )
    result(
        "live.latency",
        "add_scalar in one process to visible in `memostore show --json` from another",
        ours=lat["median"],
        baseline=30.0,
        baseline_name="TensorBoard's reload interval",
        kind="below",
        limit=2,
        note=f"median over {lat['points']} points, max {lat['max']:.2f} s; includes the "
        f"{lat['show_s']:.2f} s a `show --json` process takes here; TensorBoard's UI reloads "
        "every 30 s by default (its --reload_interval) and re-reads whole logdirs",
    )
    result(
        "live.poll",
        "A follower's read of 1,000 new points on a journal of 1,000,000",
        ours=on_long * 1e3,
        baseline=reread * 1e3,
        baseline_name="re-reading the whole journal",
        unit="ms",
        kind="info",
        note=f"{on_short * 1e3:.2f} ms on an empty journal: the cost is the new points only",
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
