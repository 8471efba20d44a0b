"""``memostore ui`` against TensorBoard serving the same metrics.

For each size (default 20 runs x 20,000 points, then 100 runs x 100,000;
``--quick``: 10 x 5,000), builds a store of runs that each logged one tag
with ``SummaryWriter``, exports them with ``memostore export tensorboard``,
and measures, as medians of several runs:

- **page open, all runs' data**: the requests the runs page makes to draw
  every run's chart, on a server that has settled after starting (TensorBoard
  has loaded every run; the dashboard has read its first page's series):
  ``/api/runs?limit=100`` and one ``/api/chart`` of every run (TensorBoard's
  default EMA 0.6, 800 columns) against TensorBoard's ``/data/runs``,
  ``/data/plugin/scalars/tags`` and ``scalars_multirun`` of every run; with
  the bytes each sends (target <= 0.3x at 20 x 20,000, <= 0.2x at
  100 x 100,000);
- **start to all runs' data**: from starting the server to the same data
  served (TensorBoard: polled until every run's last step is served);
- the same page opened again (the answers the dashboard keeps), and each
  server's peak resident memory (VmHWM);
- **live staleness**: a script logs a point every 20 ms into a running
  evaluation while a reader polls ``/api/chart`` with ``after`` every 50 ms:
  the time from a point's logging to its being served (target <= 2 s);
- time to the first chart drawn in headless Chromium (the runs page), and
  the first load of the runs table of a store of 10,000 evaluations
  (``/api/runs`` after a cold start, and the page drawn in Chromium).

TensorBoard runs with its default loader (the Rust data server where
installed, as users get it); ``--tb-python-loader`` uses its Python one.

Run from the repository root::

    python benchmarks/bench_ui.py            # both sizes (builds ~10 min, then ~10 min)
    python benchmarks/bench_ui.py --quick    # 10 runs x 5,000 points, 2,000 evaluations: ~2 min
"""

from __future__ import annotations

import argparse
import json
import math
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


def ui_page(url: str, points: int, runs: int) -> tuple[float, int]:
    """(seconds, bytes) of the requests the runs page makes to draw every run's chart."""
    started = time.perf_counter()
    listing = fetch(url + "api/runs?limit=100")
    ids = [r["id"] for r in listing["rows"]]
    query = urllib.parse.urlencode(
        {"tag": "loss", "ids": ",".join(ids), "smooth": "ema", "weight": 0.6, "buckets": 800}
    )
    with urllib.request.urlopen(f"{url}api/chart?{query}", timeout=600) as response:
        body = response.read()
    elapsed = time.perf_counter() - started
    data = json.loads(body)
    assert len(data["series"]) == len(ids) == runs
    assert all(s["steps"][-1] == points - 1 for s in data["series"])
    return elapsed, len(body)


def settle(pid: int, quiet_s: float = 1.0, timeout: float = 600) -> None:
    """Wait until a server is idle: its CPU time has not grown for *quiet_s* (it has read
    what it reads when it starts)."""

    def cpu_ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        ticks = cpu_ticks()
        if ticks != last:
            last, since = ticks, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)


def ui_measures(store: Path, points: int, runs: int) -> dict[str, float]:
    """Start to data, page open on a settled server, again, bytes, peak RSS: one server run."""
    started = time.perf_counter()
    proc, url = start_ui(store)
    try:
        ui_page(url, points, runs)
        cold = time.perf_counter() - started  # from the start of the server
        stop(proc)
        proc, url = start_ui(store)
        fetch(url + "api/live")
        settle(proc.pid)
        page, size = ui_page(url, points, runs)
        again, _ = ui_page(url, points, runs)
        return {
            "cold": cold,
            "page": page,
            "again": again,
            "bytes": size,
            "rss": peak_rss_mb(proc.pid),
        }
    finally:
        stop(proc)


def tensorboard_command() -> str:
    """The ``tensorboard`` script of this Python's environment (or the one on PATH)."""
    beside = Path(sys.executable).parent / "tensorboard"
    return str(beside) if beside.exists() else shutil.which("tensorboard") or "tensorboard"


def _post(url: str, fields: dict[str, Any]) -> bytes:
    data = urllib.parse.urlencode(fields, doseq=True).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=600) as response:
        return response.read()


def tensorboard_page(base: str, names: list[str]) -> tuple[float, int]:
    """(seconds, bytes) of the requests TensorBoard's page makes to draw every run's chart."""
    started = time.perf_counter()
    fetch(f"{base}/data/runs")
    fetch(f"{base}/data/plugin/scalars/tags")
    body = _post(f"{base}/data/plugin/scalars/scalars_multirun", {"tag": "loss", "runs": names})
    return time.perf_counter() - started, len(body)


def tensorboard_measures(
    logdir: Path, runs: int, points: int, repeat: int, python_loader: bool
) -> dict[str, float]:
    """Start to every run's scalars served, then the page's data on the loaded server."""
    port = free_port()
    started = time.perf_counter()
    loader = ("--load_fast", "false") if python_loader else ()
    proc = subprocess.Popen(
        [
            *(tensorboard_command(), "--logdir", str(logdir)),
            *("--host", "127.0.0.1", "--port", str(port), *loader, "--reload_interval", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        names: list[str] = []
        while True:
            try:
                names = list(fetch(f"{base}/data/runs"))
                if len(names) >= runs:
                    body = _post(
                        f"{base}/data/plugin/scalars/scalars_multirun",
                        {"tag": "loss", "runs": names},
                    )
                    served = json.loads(body)
                    if all(served.get(n) and served[n][-1][1] == points - 1 for n in names):
                        break
            except (urllib.error.URLError, ConnectionError, ValueError):
                pass  # not listening yet, or the tag not loaded yet
            # Half a second between rounds: the requests must not slow the loading down.
            time.sleep(0.5)
            if time.perf_counter() - started > 3600:
                raise TimeoutError("TensorBoard did not serve every run in an hour")
        cold = time.perf_counter() - started
        pages = [tensorboard_page(base, names) for _ in range(repeat)]
        return {
            "cold": cold,
            "page": statistics.median(p[0] for p in pages),
            "bytes": pages[0][1],
            "rss": peak_rss_mb(proc.pid),
        }
    finally:
        stop(proc)


LIVE_WRITER = """
    import sys
    import time
    from memostore import SummaryWriter

    writer = SummaryWriter("runs/live")
    end = time.time() + float(sys.argv[1])
    step = 0
    while time.time() < end:
        writer.add_scalar("logged_at", time.time(), step)
        step += 1
        time.sleep(0.02)
    writer.close()
"""


def live_staleness(root: Path, seconds: float = 8.0) -> tuple[float, float, int]:
    """(median, max, points) of the time from a point's logging to /api/chart serving it."""
    store = root / "live-store"
    shutil.rmtree(store, ignore_errors=True)
    script = root / "live_writer.py"
    script.write_text(textwrap.dedent(LIVE_WRITER))
    proc, url = start_ui(store)
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    writer = subprocess.Popen([sys.executable, str(script), str(seconds)], env=env, cwd=root)
    lags: list[float] = []
    try:
        run_id = None
        while run_id is None and writer.poll() is None:
            rows = fetch(url + "api/live")["rows"]
            run_id = next((r["id"] for r in rows if r["status"] == "running"), None)
            time.sleep(0.05)
        held = 0
        while writer.poll() is None:
            query = urllib.parse.urlencode(
                {"ids": run_id, "tag": "logged_at", "after": f"{run_id}:{held}"}
            )
            (series,) = fetch(f"{url}api/chart?{query}")["series"]
            now = time.time()
            if series["append"]:
                lags += [now - v for v in series["y"]]
                held = series["count"]
            time.sleep(0.05)
    finally:
        writer.wait()
        stop(proc)
    return statistics.median(lags), max(lags), len(lags)


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


FULL = {"sizes": [(20, 20_000), (100, 100_000)], "evaluations": 10_000, "repeat": 3}
QUICK = {"sizes": [(10, 5_000)], "evaluations": 2_000, "repeat": 2}
# The ratio each size is held to: the page's data, dashboard against TensorBoard.
LIMITS = {(20, 20_000): 0.3, (100, 100_000): 0.2}


def measure_size(root: Path, runs: int, points: int, options: argparse.Namespace) -> None:
    """Every measure of one size, printed and recorded."""
    store, _, logdir = metrics_fixture(root, runs, points)
    ours = [ui_measures(store, points, runs) for _ in range(options.repeat)]
    theirs = tensorboard_measures(logdir, runs, points, options.repeat, options.tb_python_loader)
    median = {k: statistics.median(m[k] for m in ours) for k in ours[0]}
    size = f"{runs} runs x {points} points"
    print(
        f"{size}: page open, all runs' data: ui {median['page']:.3f} s "
        f"({median['bytes'] / 1e3:.0f} kB), "
        f"TensorBoard {theirs['page']:.3f} s ({theirs['bytes'] / 1e3:.0f} kB); "
        f"opened again: ui {median['again']:.3f} s"
    )
    print(
        f"{size}: start to all runs' data: ui {median['cold']:.2f} s, "
        f"TensorBoard {theirs['cold']:.2f} s; peak RSS ui {median['rss']:.0f} MB, "
        f"TensorBoard {theirs['rss']:.0f} MB"
    )
    key = f"{runs}x{points}"
    result(
        f"ui.page.{key}",
        f"page open on a settled server to every run's data served, {size}",
        ours=median["page"],
        baseline=theirs["page"],
        baseline_name="TensorBoard",
        kind="max" if (runs, points) in LIMITS else "info",
        limit=LIMITS.get((runs, points), math.nan),
    )
    result(
        f"ui.start.{key}",
        f"server start to every run's data served, {size}",
        ours=median["cold"],
        baseline=theirs["cold"],
        baseline_name="TensorBoard",
        kind="info",
    )
    result(
        f"ui.rss.{key}",
        f"peak server RSS, {size}",
        ours=median["rss"],
        baseline=theirs["rss"],
        baseline_name="TensorBoard",
        kind="info",
        unit="MB",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        action="append",
        default=None,
        metavar="RUNSxPOINTS",
        help="A size to measure (repeatable); default 20x20000 and 100x100000 (--quick: 10x5000).",
    )
    parser.add_argument(
        "--evaluations",
        type=int,
        default=None,
        help="Evaluations of the table's store; default 10,000 (--quick: 2,000).",
    )
    parser.add_argument("--repeat", type=int, default=None, help="Default 3 (--quick: 2).")
    parser.add_argument(
        "--tb-python-loader",
        action="store_true",
        help="Run TensorBoard with --load_fast false (its Python loader; much slower to load).",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="Keep the generated stores here and reuse them on the next run.",
    )
    parser.add_argument("--no-browser", action="store_true", help="Skip the Chromium timings.")
    parser.add_argument("--no-table", action="store_true", help="Skip the 10,000-evaluation table.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smaller sizes for benchmarks/run_all.py: 10 runs x 5,000 points, "
        "2,000 evaluations, 2 repeats (1 to 2 minutes).",
    )
    options = parser.parse_args()
    defaults = QUICK if options.quick else FULL
    sizes = [tuple(int(n) for n in s.lower().split("x")) for s in options.size or []]
    sizes = sizes or defaults["sizes"]
    for name in ("evaluations", "repeat"):
        if getattr(options, name) is None:
            setattr(options, name, defaults[name])
    keep = options.workdir is not None
    root = options.workdir or Path(tempfile.mkdtemp(prefix="bench-ui-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        for runs, points in sizes:
            measure_size(root, runs, points, options)
        median, worst, count = live_staleness(root)
        print(f"live staleness: median {median:.2f} s, max {worst:.2f} s over {count} points")
        result(
            "ui.live_staleness",
            "a point logged to /api/chart serving it (reader polling every 50 ms)",
            ours=median,
            kind="below",
            limit=2.0,
            note=f"max {worst:.2f} s over {count} points",
        )
        if not options.no_table:
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
            store, _, _ = metrics_fixture(root, *sizes[0])
            chart = browser_times(store, options.repeat)
            print(f"first chart in Chromium: {chart:.2f} s")
            result(
                "ui.first_chart", "runs page to first charts in Chromium", ours=chart, kind="info"
            )
            if not options.no_table:
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
