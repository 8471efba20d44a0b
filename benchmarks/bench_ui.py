"""``memostore ui`` against TensorBoard serving the same metrics.

For each size (default 20 runs x 20,000 points, then 100 runs x 100,000;
``--quick``: 10 x 5,000), builds a store of runs that each logged one tag
with ``SummaryWriter``, exports them with ``memostore export tensorboard``,
and measures, as medians of several runs:

- **page open to every run drawn**, in headless Chromium (``_browser.py``),
  on servers that have settled after starting (TensorBoard has loaded every
  run; the dashboard has read its first page's series): from the navigation
  to every run's line drawn on the chart of the first tag, each page opened
  in a fresh browser profile, the two pages in rotation (target <= 0.3x
  TensorBoard at 20 x 20,000, <= 0.2x at 100 x 100,000). The runs page opens
  with every run selected (``?select=N``), as TensorBoard shows every run;
  TensorBoard draws with its SVG renderer (``?forceSVG=true``), whose lines
  are elements of the page. Also the time until the dashboard's charts are
  interactive (plotly has replaced the first lines drawn on a canvas);
- **page open, all runs' data**: the requests the runs page makes to draw
  every run's chart, without a browser: ``/api/runs?limit=100`` and one
  ``/api/chart`` of every run (TensorBoard's default EMA 0.6, 800 columns)
  against TensorBoard's ``/data/runs``, ``/data/plugin/scalars/tags`` and
  ``scalars_multirun`` of every run; with the bytes each sends;
- **start to all runs' data**: from starting the server to the same data
  served (TensorBoard: polled until every run's last step is served);
- the same page opened again (the answers the dashboard keeps), and each
  server's peak resident memory (VmHWM);
- **live staleness**: a script logs a point every 20 ms into a running
  evaluation while a reader polls ``/api/chart`` with ``after`` every 50 ms:
  the time from a point's logging to its being served (target <= 2 s);
- the first load of the runs table of a store of 10,000 evaluations
  (``/api/runs`` after a cold start, and the table drawn in Chromium).

TensorBoard runs with its default loader (the Rust data server where
installed, as users get it); ``--tb-python-loader`` uses its Python one.

Run from the repository root::

    python benchmarks/bench_ui.py            # both sizes (builds ~6 min, then ~15 min)
    python benchmarks/bench_ui.py --quick    # 10 runs x 5,000 points, 2,000 evaluations: ~2 min
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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
from _common import result
from _servers import (
    fetch,
    peak_rss_mb,
    post_form,
    settle,
    start_ui,
    stop,
    tensorboard_server,
    with_token,
)

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
    assert all(s["x"][-1] == points - 1 for s in data["series"])
    return elapsed, len(body)


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


def tensorboard_page(base: str, names: list[str]) -> tuple[float, int]:
    """(seconds, bytes) of the requests TensorBoard's page makes to draw every run's chart."""
    started = time.perf_counter()
    fetch(f"{base}/data/runs")
    fetch(f"{base}/data/plugin/scalars/tags")
    body = post_form(f"{base}/data/plugin/scalars/scalars_multirun", {"tag": "loss", "runs": names})
    return time.perf_counter() - started, len(body)


def tensorboard_measures(
    logdir: Path, runs: int, points: int, repeat: int, python_loader: bool
) -> dict[str, float]:
    """Start to every run's scalars served, then the page's data on the loaded server."""
    with tensorboard_server(logdir, runs, points, python_loader) as server:
        pages = [tensorboard_page(server["base"], server["names"]) for _ in range(repeat)]
        return {
            "cold": server["cold"],
            "page": statistics.median(p[0] for p in pages),
            "bytes": pages[0][1],
            "rss": peak_rss_mb(server["pid"]),
        }


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


def drawn_in_chromium(
    store: Path, logdir: Path, runs: int, points: int, repeat: int, python_loader: bool
) -> dict[str, float]:
    """Medians of page open to every run's line drawn, memostore ui against TensorBoard.

    Both servers settled first (as for the page's data); then, *repeat* rounds of
    one page open each, in rotation, each in a fresh Chromium (see :mod:`_browser`).
    The runs page opens with every run selected (``?select=N``), as TensorBoard
    shows every run.
    """
    import _browser

    proc, url = start_ui(store)
    try:
        fetch(url + "api/live")
        settle(proc.pid)
        # TensorBoard's default reload interval: reading the directory again every second
        # would slow its pages down.
        with tensorboard_server(logdir, runs, points, python_loader, reload_s=5) as server:
            ours, theirs = [], []
            for _ in range(repeat):
                # Each page on idle servers: the other one's page answered, nothing pending.
                settle(proc.pid, 0.5, timeout=60)
                settle(server["pid"], 0.5, timeout=60)
                ours.append(
                    _browser.time_to_drawn(
                        with_token(f"{url}?select={runs}"),
                        {"drawn": _browser.MEMOSTORE_DRAWN, "ready": _browser.MEMOSTORE_READY},
                        runs,
                    )
                )
                settle(proc.pid, 0.5, timeout=60)
                settle(server["pid"], 0.5, timeout=60)
                theirs.append(
                    _browser.time_to_drawn(
                        server["base"] + "/?forceSVG=true",
                        {"drawn": _browser.TENSORBOARD_DRAWN},
                        runs,
                    )
                )
    finally:
        stop(proc)

    def median(found: list[dict[str, Any]], key: str) -> float:
        return statistics.median(f[key] for f in found)

    return {
        "drawn": median(ours, "drawn"),
        "ready": median(ours, "ready"),
        "bytes": median(ours, "bytes"),
        "requests": median(ours, "requests"),
        "tb_drawn": median(theirs, "drawn"),
        "tb_bytes": median(theirs, "bytes"),
        "tb_requests": median(theirs, "requests"),
        "all": [round(f["drawn"], 3) for f in ours],
        "tb_all": [round(f["drawn"], 3) for f in theirs],
    }


def table_in_chromium(store: Path, repeat: int) -> float:
    """Median seconds from opening the runs page on a server just started to its table drawn."""
    import _browser

    drawn = "return document.getElementById('view').dataset.table === 'drawn';"
    times = []
    for _ in range(repeat):
        proc, url = start_ui(store)
        try:
            fetch(url + "api/live")  # the server is up (the listing warms meanwhile)
            times.append(_browser.time_to_drawn(with_token(url), {"table": drawn}, 0)["table"])
        finally:
            stop(proc)
    return statistics.median(times)


def has_browser() -> bool:
    """Whether the Chromium and chromedriver the timings drive are installed."""
    import _browser

    return _browser.has_chromium()


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
# The ratio each size is held to: page open to every run drawn, dashboard against TensorBoard.
LIMITS = {(20, 20_000): 0.3, (100, 100_000): 0.2}


def measure_size(root: Path, runs: int, points: int, options: argparse.Namespace) -> None:
    """Every measure of one size, printed and recorded."""
    store, _, logdir = metrics_fixture(root, runs, points)
    size = f"{runs} runs x {points} points"
    key = f"{runs}x{points}"
    if not options.no_browser and has_browser():
        drawn = drawn_in_chromium(
            store, logdir, runs, points, options.repeat, options.tb_python_loader
        )
        print(
            f"{size}: page open to every run's line drawn in Chromium: ui {drawn['drawn']:.2f} s "
            f"(each {drawn['all']}; {drawn['requests']:.0f} requests, "
            f"{drawn['bytes'] / 1e6:.1f} MB), TensorBoard {drawn['tb_drawn']:.2f} s "
            f"(each {drawn['tb_all']}; {drawn['tb_requests']:.0f} requests, "
            f"{drawn['tb_bytes'] / 1e6:.1f} MB); ratio {drawn['drawn'] / drawn['tb_drawn']:.2f}; "
            f"ui charts interactive (plotly) {drawn['ready']:.2f} s"
        )
        result(
            f"ui.drawn.{key}",
            f"page open to every run's line drawn in Chromium, {size}",
            ours=drawn["drawn"],
            baseline=drawn["tb_drawn"],
            baseline_name="TensorBoard, SVG renderer",
            kind="max" if (runs, points) in LIMITS else "info",
            limit=LIMITS.get((runs, points), math.nan),
        )
        result(
            f"ui.interactive.{key}",
            f"page open to every chart of the first screen interactive (plotly), {size}",
            ours=drawn["ready"],
            baseline=drawn["tb_drawn"],
            baseline_name="TensorBoard, lines drawn",
            kind="info",
        )
    ours = [ui_measures(store, points, runs) for _ in range(options.repeat)]
    theirs = tensorboard_measures(logdir, runs, points, options.repeat, options.tb_python_loader)
    median = {k: statistics.median(m[k] for m in ours) for k in ours[0]}
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
    result(
        f"ui.page.{key}",
        f"page open on a settled server to every run's data served, {size}",
        ours=median["page"],
        baseline=theirs["page"],
        baseline_name="TensorBoard",
        kind="info",
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
        elif not options.no_browser and not options.no_table:
            table = table_in_chromium(big, options.repeat)
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
