"""Headless Chromium for the dashboard benchmarks: page open to every run's line drawn.

A page is opened in a fresh Chromium profile (nothing cached: the first visit)
with a probe injected before the page's own scripts: on every animation frame
it checks whether the page has drawn what it is waiting for and, the first
time it has, records ``performance.now()``, the milliseconds since the
navigation started. The probe holds the browser's own ``requestAnimationFrame``
taken before the page loads, so a page that wraps timers (TensorBoard's
Angular zone) neither runs its change detection for the probe nor slows it.

What "drawn" means for each page:

- ``memostore ui``: the page says it has drawn the runs view
  (``view.dataset.ready == "runs"``, set once every chart of the first screen
  is drawn) and the first chart (the first tag) holds a line for every run
  (``data-series`` and plotly's traces).
- TensorBoard (``?forceSVG=true``: its SVG renderer, so that the lines are
  elements of the page): the first scalar card holds an opaque path (the
  smoothed line, drawn over the faded raw one) with points for every run.
  Its default renderer draws with WebGL into a canvas, which a page cannot
  inspect; the figures of that renderer would be the same requests and work
  less the SVG paths.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ui_support import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS

PROBE = """
(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const checks = { %s };
  const times = (window.__drawn = {});
  const poll = () => {
    for (const [name, check] of Object.entries(checks)) {
      if (name in times) continue;
      let done = false;
      try { done = check(); } catch (error) { done = false; }
      if (done) times[name] = performance.now();
    }
    if (Object.keys(times).length < Object.keys(checks).length) frame(poll);
  };
  frame(poll);
})();
"""

# Every run's line on the first chart: sketched on a canvas or drawn by plotly.
MEMOSTORE_DRAWN = """
  const chart = document.querySelector("#charts .chart");
  return !!chart && chart.dataset.lines === "%(runs)d";
"""

# The runs view drawn with plotly (hover and zoom work): the page's own mark.
MEMOSTORE_READY = """
  const view = document.getElementById("view");
  const chart = document.querySelector("#charts .chart");
  return !!(view && view.dataset.ready === "runs" && chart && chart.data &&
    chart.data.filter((t) => t.x && t.x.length).length >= %(runs)d);
"""

TENSORBOARD_DRAWN = """
  const card = document.querySelector("scalar-card");
  if (!card) return false;
  let lines = 0;
  for (const path of card.querySelectorAll("line-chart .series-view svg > path")) {
    if (path.style.opacity === "1" && (path.getAttribute("d") || "").length > 40) lines += 1;
  }
  return lines >= %(runs)d;
"""


def has_chromium() -> bool:
    """Whether the Chromium and chromedriver the timings drive are installed."""
    return os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven by selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="bench-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(600)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def time_to_drawn(
    url: str, conditions: dict[str, str], runs: int, timeout: float = 600
) -> dict[str, Any]:
    """Open *url* in a fresh Chromium; seconds from navigation to each of *conditions*.

    Args:
        url: the page.
        conditions: name -> the body of a JavaScript function that returns true once
            the page has drawn what the name stands for (``%(runs)d``: *runs*).
        runs: how many runs the page draws.
        timeout: seconds to wait for every condition.

    Returns:
        ``{name: seconds, ..., "requests": n, "bytes": transferred, "resources":
        [(name, start_s, end_s, bytes), ...]}``, the requests answered before the
        first of *conditions* held.
    """
    checks = ", ".join(
        f"{json.dumps(name)}: () => {{ {body % {'runs': runs}} }}"
        for name, body in conditions.items()
    )
    with chromium() as driver:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE % checks})
        driver.get(url)
        deadline = time.monotonic() + timeout
        while True:
            times = driver.execute_script("return window.__drawn") or {}
            if len(times) == len(conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: only {sorted(times)} of {sorted(conditions)} in time")
            time.sleep(0.05)
        first = times[next(iter(conditions))]
        entries = driver.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter((e) => e.responseEnd <= arguments[0])"
            ".map((e) => [e.name, e.startTime, e.responseEnd, e.encodedBodySize])",
            first,
        )
    resources = [(name, start / 1e3, end / 1e3, int(size)) for name, start, end, size in entries]
    return {
        **{name: ms / 1e3 for name, ms in times.items()},
        "requests": len(resources) + 1,  # and the page itself
        "bytes": sum(r[3] for r in resources),
        "resources": resources,
    }
