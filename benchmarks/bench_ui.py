"""``memostore ui`` against TensorBoard serving the same metrics.

Builds a store of R runs (default 100) that each logged P points (default
100,000) of one tag with ``SummaryWriter``, exports them with ``memostore
export tensorboard`` and measures, as medians of several runs:

- time from starting the server to the scalars of all R runs served:
  TensorBoard's ``/data/plugin/scalars/scalars`` (one request per run, polled
  until every run's last step is there) against the dashboard's
  ``/api/chart`` (one request for all runs, 250 buckets: at most 1,000 points
  per run, as TensorBoard's default 1,000 samples) (target <= 0.2x);
- peak resident memory of each server after that (VmHWM);
- time to the first chart drawn in headless Chromium (the runs page);
- the first load of the runs table of a store of 10,000 evaluations
  (``/api/runs`` after a cold start, and the page drawn in Chromium).

The table's time is from the browser opening the page (the server has just
started and answers) to the table drawn; the store's evaluation index is
complete, as a store written by ``@memo`` keeps it.

Run from the repository root::

    python benchmarks/bench_ui.py            # the full size (TensorBoard takes ~25 min)
    python benchmarks/bench_ui.py --quick    # 10 runs x 5,000 points, 2,000 evaluations: < 2 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import result

WRITER = """
    import sys
    from memostore import memo, SummaryWriter

    @memo
    def run(i: int, points: int):
        writer = SummaryWriter()
        for step in range(points):
            writer.add_scalar("loss", 1.0 / (step + 1) + (i % 10) * 1e-3, step)
        writer.close()
        return i

    for i in range(int(sys.argv[1])):
        run(i, int(sys.argv[2]))
"""


def build_metrics_store(root: Path, runs: int, points: int) -> tuple[Path, list[str]]:
    """A store of *runs* evaluations with *points* points of ``loss`` each; (store, ids)."""
    store = root / "store"
    script = root / "writer.py"
    script.write_text(textwrap.dedent(WRITER))
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    subprocess.run([sys.executable, str(script), str(runs), str(points)], env=env, check=True)
    listed = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "log", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return store, [r["id"] for r in json.loads(listed.stdout)]


def metrics_fixture(root: Path, runs: int, points: int) -> tuple[Path, list[str], Path]:
    """(store, evaluation ids, TensorBoard logdir) for the size asked, built once per *root*."""
    tag = root / f"metrics-{runs}x{points}"
    store, logdir = tag / "store", tag / "tb"
    if (tag / "ids.json").exists():
        return store, json.loads((tag / "ids.json").read_text()), logdir
    shutil.rmtree(tag, ignore_errors=True)
    tag.mkdir(parents=True)
    began = time.perf_counter()
    store, ids = build_metrics_store(tag, runs, points)
    subprocess.run(
        [
            *(sys.executable, "-m", "memostore_cli.main", "--store", str(store)),
            *("export", "tensorboard", *ids, "--logdir", str(logdir)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (tag / "ids.json").write_text(json.dumps(ids))
    took = time.perf_counter() - began
    print(f"built {runs} runs x {points} points and exported them in {took:.0f} s")
    return store, ids, logdir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, timeout: float = 120) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of a process (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_ui(store: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def ui_scalars(store: Path, ids: list[str], points: int) -> tuple[float, float]:
    """(seconds from start to every run's scalars served, peak RSS MB) of ``memostore ui``."""
    started = time.perf_counter()
    proc, url = start_ui(store)
    try:
        query = urllib.parse.urlencode({"tag": "loss", "ids": ",".join(ids), "buckets": 250})
        data = fetch(f"{url}api/chart?{query}")
        elapsed = time.perf_counter() - started
        assert len(data["series"]) == len(ids)
        assert all(s["steps"][-1] == points - 1 for s in data["series"])
        return elapsed, peak_rss_mb(proc.pid)
    finally:
        stop(proc)


def tensorboard_command() -> str:
    """The ``tensorboard`` script of this Python's environment (or the one on PATH)."""
    beside = Path(sys.executable).parent / "tensorboard"
    return str(beside) if beside.exists() else shutil.which("tensorboard") or "tensorboard"


def tensorboard_scalars(logdir: Path, runs: int, points: int) -> tuple[float, float]:
    """(seconds from start to every run's scalars served, peak RSS MB) of TensorBoard."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            *(tensorboard_command(), "--logdir", str(logdir)),
            *("--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"),
            *("--reload_interval", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        done: set[str] = set()
        names: list[str] = []
        while len(done) < runs:
            try:
                if len(names) < runs:
                    names = list(fetch(f"{base}/data/runs"))
                for name in names:
                    if name in done:
                        continue
                    query = urllib.parse.urlencode({"run": name, "tag": "loss"})
                    try:
                        points_served = fetch(f"{base}/data/plugin/scalars/scalars?{query}")
                    except urllib.error.HTTPError:
                        continue  # the run's tag is not loaded yet
                    if points_served and points_served[-1][1] == points - 1:
                        done.add(name)
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet
            if len(done) < runs:
                # Half a second between rounds: a round of requests must not itself
                # slow down the loading it waits for.
                time.sleep(0.5)
            if time.perf_counter() - started > 1800:
                raise TimeoutError("TensorBoard did not serve every run in 30 minutes")
        return time.perf_counter() - started, peak_rss_mb(proc.pid)
    finally:
        stop(proc)


def browser_times(store: Path, repeat: int, table_only: bool = False) -> float:
    """Median seconds from opening the runs page to its first charts drawn (or its table)."""
    from ui_support import browser, wait_for

    script = "return document.getElementById('view').dataset." + (
        "table" if table_only else "ready"
    )
    expected = "drawn" if table_only else "runs"

    times = []
    with browser() as driver:
        for _ in range(repeat):
            proc, url = start_ui(store)
            try:
                fetch(url + "api/live")  # the server is up (the listing warms meanwhile)
                started = time.perf_counter()
                driver.get(url)
                wait_for(lambda: driver.execute_script(script) == expected, timeout=300, every=0.01)
                times.append(time.perf_counter() - started)
                driver.get("about:blank")
            finally:
                stop(proc)
    return statistics.median(times)


def has_browser() -> bool:
    """Whether the Chromium and chromedriver the timings drive are installed."""
    from ui_support import CHROMEDRIVER, CHROMIUM

    return os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)


def table_store(root: Path, count: int) -> Path:
    """A store of *count* evaluations (as ``bench_cli.py`` builds them), built once per *root*."""
    from bench_cli import build_store

    store = root / f"table-{count}"
    built = root / f"table-{count}.built"
    if not built.exists():
        shutil.rmtree(store, ignore_errors=True)
        build_store(store, count, big_every=0)
        # Built below @memo, the store has no evaluation index yet: one listing
        # writes it, as every @memo call would have.
        subprocess.run(
            [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "log", "-n", "1"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        built.write_text("")
    return store


def cold_listing(store: Path, repeat: int) -> float:
    """Median seconds from starting the server to ``/api/runs`` answered."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        proc, url = start_ui(store)
        try:
            rows = fetch(url + "api/runs")["rows"]
            times.append(time.perf_counter() - started)
        finally:
            stop(proc)
    assert rows
    return statistics.median(times)


FULL = {"runs": 100, "points": 100_000, "evaluations": 10_000, "repeat": 3}
QUICK = {"runs": 10, "points": 5_000, "evaluations": 2_000, "repeat": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="Default 100 (--quick: 10).")
    parser.add_argument(
        "--points", type=int, default=None, help="Points a run; default 100,000 (--quick: 5,000)."
    )
    parser.add_argument(
        "--evaluations",
        type=int,
        default=None,
        help="Evaluations of the table's store; default 10,000 (--quick: 2,000).",
    )
    parser.add_argument("--repeat", type=int, default=None, help="Default 3 (--quick: 2).")
    parser.add_argument(
        "--tb-repeat",
        type=int,
        default=1,
        help="TensorBoard runs (default 1: it takes minutes on the full size).",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="Keep the generated stores here and reuse them on the next run.",
    )
    parser.add_argument("--no-browser", action="store_true", help="Skip the Chromium timings.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smaller sizes for benchmarks/run_all.py: 10 runs x 5,000 points, "
        "2,000 evaluations, 2 repeats (1 to 2 minutes).",
    )
    options = parser.parse_args()
    sizes = QUICK if options.quick else FULL
    for name, value in sizes.items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    keep = options.workdir is not None
    root = options.workdir or Path(tempfile.mkdtemp(prefix="bench-ui-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        store, ids, logdir = metrics_fixture(root, options.runs, options.points)
        ours, baseline, our_rss, tb_rss = [], [], [], []
        for i in range(max(options.repeat, options.tb_repeat)):
            if i < options.repeat:
                seconds, rss = ui_scalars(store, ids, options.points)
                ours.append(seconds)
                our_rss.append(rss)
            if i < options.tb_repeat:
                seconds, rss = tensorboard_scalars(logdir, options.runs, options.points)
                baseline.append(seconds)
                tb_rss.append(rss)
        ui_s, tb_s = statistics.median(ours), statistics.median(baseline)
        print(f"scalars of {options.runs} runs served: ui {ui_s:.2f} s, TensorBoard {tb_s:.2f} s")
        result(
            "ui.scalars",
            f"start to scalars of {options.runs} runs x {options.points} points served",
            ours=ui_s,
            baseline=tb_s,
            baseline_name="TensorBoard",
            kind="max",
            limit=0.2,
        )
        ui_mb, tb_mb = statistics.median(our_rss), statistics.median(tb_rss)
        print(f"peak server RSS: ui {ui_mb:.0f} MB, TensorBoard {tb_mb:.0f} MB")
        result(
            "ui.rss",
            "peak server RSS after serving those scalars",
            ours=ui_mb,
            baseline=tb_mb,
            baseline_name="TensorBoard",
            kind="info",
            unit="MB",
        )
        big = table_store(root, options.evaluations)
        listing = cold_listing(big, options.repeat)
        print(f"{options.evaluations} evaluations: /api/runs {listing:.2f} s after start")
        result(
            "ui.table_listing",
            f"start to /api/runs of {options.evaluations} evaluations",
            ours=listing,
            kind="info",
        )
        if not options.no_browser and not has_browser():
            print("no Chromium timings: needs Debian's chromium and chromium-driver")
        elif not options.no_browser:
            chart = browser_times(store, options.repeat)
            print(f"first chart in Chromium: {chart:.2f} s")
            result(
                "ui.first_chart", "runs page to first charts in Chromium", ours=chart, kind="info"
            )
            table = browser_times(big, options.repeat, table_only=True)
            print(f"{options.evaluations}-evaluation table in Chromium: {table:.2f} s")
            result(
                "ui.table_page",
                f"runs page of {options.evaluations} evaluations drawn in Chromium",
                ours=table,
                kind="below",
                limit=1.0,
            )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
