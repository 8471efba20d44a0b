"""`memostore ui` following a running run beyond scalars: its images, text, histograms and PR
curves update on the runs page as it logs, card by card, in headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write_script

pytest.importorskip("starlette")
from ui_support import browser as open_browser
from ui_support import get_json, ui_server, wait_for, wait_ready

WATCH = """
    import os, sys, time
    import numpy as np
    from memostore import memo, SummaryWriter

    @memo
    def watch(seed: int, stop: str):
        writer = SummaryWriter()
        step = 0
        deadline = time.time() + 120
        while step < 2 or (not os.path.exists(stop) and time.time() < deadline):
            shade = np.full((3, 6, 6), (step % 10) / 10 + seed / 20, dtype=np.float32)
            writer.add_image("frames", shade, step)
            writer.add_text("log", f"## step {step}\\n\\n- *seed* {seed}", step)
            writer.add_histogram("w", np.random.default_rng(step).normal(step, 1, 200), step)
            labels = np.array([0, 1] * 16)
            writer.add_pr_curve("pr", labels, np.linspace(0, 1, 32) * (step % 5 + 1) / 5, step)
            writer.flush()
            step += 1
            time.sleep(0.3)
        writer.close()
        return seed

    watch(int(sys.argv[1]), sys.argv[2])
"""


def _open_tab(driver: Any, tab: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f".tab[data-tab='{tab}']").click()
    script = "return document.getElementById('kind-panel').dataset.ready"
    wait_for(lambda: driver.execute_script(script) == tab)


def _grows(driver: Any, script: str, *args: Any) -> None:
    """Wait until the number *script* returns is larger than it is now."""
    now = int(driver.execute_script(script, *args))
    wait_for(lambda: int(driver.execute_script(script, *args) or 0) > now, 15)


@pytest.mark.slow
def test_image_text_histogram_and_pr_tabs_follow_a_running_run(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    script = write_script(tmp_path, "watch.py", WATCH)
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    done = tmp_path / "done"
    done.write_text("")
    subprocess.run([sys.executable, str(script), "0", str(done)], env=env, check=True, timeout=120)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, str(script), "1", str(stop)], env=env)
    try:
        with ui_server(store) as url, open_browser() as driver:

            def running() -> list[dict[str, Any]]:
                return [r for r in get_json(url + "api/live")[1]["rows"] if r["metrics"]]

            wait_for(running, 60)
            driver.get(url + "?refresh=1000#/runs/images")
            wait_ready(driver, "runs")
            live = running()[0]["id"]
            ended = driver.execute_script(
                "return [...ms.table.selected].find(id => id !== arguments[0])", live
            )
            assert driver.execute_script("return ms.table.selected.has(arguments[0])", live)
            # What was drawn stays drawn: marked now, the marks must survive the refreshes.
            mark = (
                "document.querySelectorAll('#kind-panel .kind-tag, #kind-panel .card')"
                ".forEach(e => { e.__kept = true; });"
                "document.querySelectorAll('#kind-panel .chart')"
                ".forEach(c => { c.__data = c.data; })"
            )
            kept = (
                "return [...document.querySelectorAll('#kind-panel .kind-tag, #kind-panel .card')]"
                ".every(e => e.__kept)"
            )

            # Images: the running run's card shows each new step; a slider the reader
            # moved stays where it was put.
            card = f"#kind-panel .card[data-id='{live}']"
            driver.execute_script(mark)
            step = "return document.querySelector(arguments[0]).dataset.step"
            _grows(driver, step, card)
            src = driver.find_element(By.CSS_SELECTOR, card + " img").get_attribute("src")
            _grows(driver, step, card)
            assert driver.find_element(By.CSS_SELECTOR, card + " img").get_attribute("src") != src
            slider = driver.find_element(By.CSS_SELECTOR, ".step-slider")
            driver.execute_script(
                "arguments[0].value = '0'; arguments[0].dispatchEvent(new Event('input'))", slider
            )
            top = driver.execute_script("return Number(arguments[0].max)", slider)
            _grows(driver, "return Number(arguments[0].max)", slider)
            assert slider.get_attribute("value") == "0"
            assert driver.find_element(By.CSS_SELECTOR, card).get_attribute("data-step") == "0"
            assert driver.execute_script("return Number(arguments[0].max)", slider) > top
            assert driver.execute_script(kept)

            # Text: Markdown, as TensorBoard shows it, the running run's at its last step.
            _open_tab(driver, "text")
            driver.execute_script(mark)
            text = card + " .logged-text"
            _grows(driver, step, text)
            heading = driver.find_element(By.CSS_SELECTOR, text + " h2").text
            assert (
                heading
                == f"step {driver.find_element(By.CSS_SELECTOR, text).get_attribute('data-step')}"
            )
            assert driver.find_element(By.CSS_SELECTOR, text + " li em").text == "seed"
            assert driver.execute_script(kept)

            # Histograms: the running run's chart redrawn with its new steps, the ended
            # run's left as it was.
            _open_tab(driver, "histograms")
            driver.execute_script(mark)
            chart = card + " .chart"
            _grows(driver, "return document.querySelector(arguments[0]).dataset.steps", chart)
            redrawn = (
                "return document.querySelector(arguments[0]).data !== "
                "document.querySelector(arguments[0]).__data"
            )
            assert driver.execute_script(redrawn, chart)
            assert not driver.execute_script(
                redrawn, f"#kind-panel .card[data-id='{ended}'] .chart"
            )
            assert driver.execute_script(kept)

            # PR curves: the slider follows the new steps, the chart shows the last one.
            _open_tab(driver, "pr")
            driver.execute_script(mark)
            pr = "#kind-panel .chart.pr"
            _grows(driver, "return document.querySelector(arguments[0]).dataset.step", pr)
            slider = driver.find_element(By.CSS_SELECTOR, ".step-slider")
            assert slider.get_attribute("value") == slider.get_attribute("max")
            assert driver.execute_script(kept)
    finally:
        stop.write_text("")
        writer.wait(timeout=60)
