"""The runs page as a TensorBoard user expects it: outliers, NaN, regex and metric filters,
the view in the URL, image downloads, dark mode, histograms on one scale, runs that come
and go. One page load in a real headless Chromium checks them in turn."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script
from ui_support import browser as open_browser
from ui_support import get_json, screenshot, ui_server, wait_for, wait_ready

pytest.importorskip("starlette")

RUNS = """
    import math
    import sys
    import numpy as np
    from memostore import SummaryWriter

    for seed in [int(s) for s in sys.argv[1].split(",")]:
        writer = SummaryWriter(f"seed{seed}")
        for step in range(100):
            loss = math.exp(-step / 30) + 0.05 * seed
            if seed == 1 and step == 50:
                loss = float("nan")
            if seed == 1 and step == 70:
                loss = float("inf")
            writer.add_scalar("loss", loss, step)
            # One spike of 1000 at step 10: without outlier scaling the curves are flat.
            writer.add_scalar("acc", 1000.0 if step == 10 else 0.5 + step / 400 + seed / 100, step)
            writer.add_scalar("val/loss", math.exp(-step / 40) + 0.1, step)
            writer.add_scalar("bounds/lo", loss - 0.1, step)
            writer.add_scalar("bounds/hi", loss + 0.1, step)
        writer.add_custom_scalars({
            "losses": {"train vs val": ["Multiline", ["^loss$", "^val/loss$"]]},
            "spread": {"loss within bounds": ["Margin", ["loss", "bounds/lo", "bounds/hi"]]},
        })
        writer.add_audio("tone", np.sin(np.arange(4000) * (0.05 + seed / 100)), 0, sample_rate=8000)
        writer.add_histogram("weights", np.linspace(-1 - seed, 1 + seed, 200), 0)
        writer.add_hparams({"seed": seed}, {"hparam/acc": 0.5 + seed / 20})
        writer.close()
"""


def _run(script: Path, store: Path, seeds: str) -> None:
    run_script(script, seeds, env={"MEMOSTORE_DIR": str(store)})


def _js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def _type(driver: Any, element_id: str, text: str) -> None:
    _js(
        driver,
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'))",
        element_id,
        text,
    )


def _rows(driver: Any) -> list[str]:
    return _js(
        driver, "return [...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.id)"
    )


def _yrange(driver: Any, tag: str) -> list[float]:
    return _js(
        driver, f"return document.querySelector(\".chart[data-tag='{tag}']\").layout.yaxis.range"
    )


@pytest.mark.slow
def test_runs_page_views_as_tensorboard_users_expect(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    script = write_script(tmp_path, "runs.py", RUNS)
    _run(script, store, "0,1,2,3")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with ui_server(store) as url, open_browser() as driver:
        driver.execute_cdp_cmd(
            "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
        )
        driver.get(url + "?refresh=1000#/runs/scalars")
        wait_ready(driver, "runs")
        wait_for(lambda: _js(driver, "return document.getElementById('charts').dataset.ready"))
        assert len(_js(driver, "return [...ms.table.selected]")) == 4

        # hparam/ comes after the other groups; its points at one step get whole steps around
        # it, their values a range around them (not -1..1).
        groups = _js(
            driver,
            "return [...document.querySelectorAll('#charts .group')].map(g => g.dataset.group)",
        )
        assert groups[-1] == "hparam" and groups.index("") < groups.index("hparam")
        low, high = _yrange(driver, "hparam/acc")
        assert 0.4 < low < 0.5 and 0.65 < high < 0.8
        xaxis = _js(
            driver, "return document.querySelector(\".chart[data-tag='hparam/acc']\").layout.xaxis"
        )
        assert xaxis["range"] == [-1, 1] and xaxis["dtick"] == 1

        # Outliers are left out of the y range by default (the spike of 1000 is not in it).
        assert _js(driver, "return document.getElementById('outliers').checked")
        assert _yrange(driver, "acc")[1] < 100  # the smoothed tail of the spike stays in
        screenshot(
            driver,
            tmp_path,
            "ui-outliers-nan.png",
            driver.find_element(By.CSS_SELECTOR, "#charts .charts"),
        )

        # NaN: kept at its step, marked with a triangle; the tooltip at step 50 shows it.
        loss = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='loss']")
        assert loss.get_attribute("data-nan") == "1"
        at50 = _js(
            driver,
            "return ms.tooltip.rows(ms.charts.charts.get('loss'), 50)"
            ".map(r => [ms.nameOf(r.id), r.step, String(r.value)])",
        )
        assert ["seed1", 50, "NaN"] in at50
        # +inf at step 70 is a point of the line plotly cannot draw: the line breaks there.
        line = _js(
            driver,
            "const t = arguments[0].data.find(t => t.uid.startsWith('line_')"
            " && t.name === 'seed1');"
            "return [t.x.indexOf(70), String(t.y[t.x.indexOf(70)])]",
            loss,
        )
        assert line[0] >= 0 and line[1] == "Infinity"

        # The toggle: the spike is back in the range.
        driver.find_element(By.ID, "outliers").click()
        wait_for(lambda: _yrange(driver, "acc")[1] > 300)  # smoothed, the spike is 400

        # PNG and SVG of a chart.
        card = driver.find_element(By.CSS_SELECTOR, "#charts .card[data-tag='loss']")
        card.find_element(By.CSS_SELECTOR, "button.png").click()
        card.find_element(By.CSS_SELECTOR, "button.svg").click()
        png = wait_for(
            lambda: (downloads / "loss.png").exists() and (downloads / "loss.png").read_bytes()
        )
        svg = wait_for(
            lambda: (downloads / "loss.svg").exists() and (downloads / "loss.svg").read_text()
        )
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and "<svg" in svg

        # The run filter is a regular expression; a broken one filters nothing, and says so.
        _type(driver, "filter-text", "seed[02]$")
        wait_for(lambda: len(_rows(driver)) == 2)
        names = _js(
            driver, "return [...document.querySelectorAll('#runs td.name')].map(t => t.textContent)"
        )
        assert sorted(names) == ["seed0", "seed2"]
        _type(driver, "filter-text", "seed[")
        wait_for(lambda: len(_rows(driver)) == 4)
        assert "invalid" in driver.find_element(By.ID, "filter-text").get_attribute("class")
        assert "not a regular expression" in driver.find_element(By.ID, "filter-text-error").text
        _type(driver, "filter-text", "seed[0-2]")

        # Runs filtered by a metric's value (a range, as TensorBoard's min and max).
        _type(driver, "filter-args", "hparam/acc>0.52, hparam/acc<=0.6")
        wait_for(lambda: len(_rows(driver)) == 2)  # seed1 (0.55), seed2 (0.6)

        # The view is in the URL: reloaded, the page opens as it was left.
        _type(driver, "tag-filter", "loss|acc")
        driver.find_element(By.CSS_SELECTOR, "#runs tbody input.select").click()
        selected = sorted(_js(driver, "return [...ms.table.selected]"))
        wait_for(lambda: "tags=" in driver.current_url)
        shared = driver.current_url
        assert "outliers=false" in shared and "seed%5B0-2%5D" in shared
        driver.get("about:blank")
        driver.get(shared)
        wait_ready(driver, "runs")
        assert sorted(_js(driver, "return [...ms.table.selected]")) == selected
        assert driver.find_element(By.ID, "tag-filter").get_attribute("value") == "loss|acc"
        assert driver.find_element(By.ID, "filter-text").get_attribute("value") == "seed[0-2]"
        assert not driver.find_element(By.ID, "outliers").is_selected()
        assert len(_rows(driver)) == 2
        _type(driver, "filter-text", "")
        _type(driver, "filter-args", "")
        _type(driver, "tag-filter", "")
        driver.find_element(By.ID, "outliers").click()

        # Histograms of one tag share their scale across runs.
        driver.find_element(By.CSS_SELECTOR, ".tab[data-tab='histograms']").click()
        wait_for(
            lambda: (
                _js(driver, "return document.getElementById('kind-panel').dataset.ready")
                == "histograms"
            )
        )
        ranges = _js(
            driver,
            "return [...document.querySelectorAll('#kind-panel .chart')]"
            ".map(c => JSON.stringify(c.layout.xaxis.range))",
        )
        assert len(ranges) == 3 and len(set(ranges)) == 1
        driver.find_element(By.CSS_SELECTOR, ".tab[data-tab='scalars']").click()

        # Custom scalars layouts are drawn: train vs val loss on one chart, a margin chart.
        driver.find_element(By.CSS_SELECTOR, ".tab[data-tab='custom']").click()
        wait_for(
            lambda: (
                _js(driver, "return document.getElementById('kind-panel').dataset.ready")
                == "custom"
            )
        )
        multi = driver.find_element(
            By.CSS_SELECTOR, "#kind-panel .chart[data-title='train vs val']"
        )
        assert multi.get_attribute("data-tags") == "loss\nval/loss"
        assert multi.get_attribute("data-lines") == "6"  # 2 tags x the 3 runs selected
        margin = driver.find_element(
            By.CSS_SELECTOR, "#kind-panel .chart[data-title='loss within bounds']"
        )
        assert margin.get_attribute("data-lines") == "3"
        assert (
            _js(driver, "return arguments[0].data.filter(t => t.fill === 'tonexty').length", margin)
            == 3
        )
        screenshot(
            driver,
            tmp_path,
            "ui-custom-scalars.png",
            multi.find_element(By.XPATH, "./ancestor::div[contains(@class, 'card')]"),
        )

        # Audio across runs: a player per run at the slider's step.
        driver.find_element(By.CSS_SELECTOR, ".tab[data-tab='audio']").click()
        wait_for(
            lambda: (
                _js(driver, "return document.getElementById('kind-panel').dataset.ready") == "audio"
            )
        )
        sources = _js(
            driver, "return [...document.querySelectorAll('#kind-panel audio')].map(a => a.src)"
        )
        assert len(sources) == 3 and all("/api/media?" in src for src in sources)
        with urllib.request.urlopen(sources[0], timeout=30) as response:
            assert response.read(4) == b"RIFF"
        driver.find_element(By.CSS_SELECTOR, ".tab[data-tab='scalars']").click()

        # Dark: the system's preference, on auto; the button's choice over it.
        driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
        )
        wait_for(lambda: _js(driver, "return document.documentElement.dataset.theme") == "dark")
        wait_ready(driver, "runs")
        wait_for(lambda: _js(driver, "return document.getElementById('charts').dataset.ready"))
        paper = _js(
            driver,
            "return document.querySelector(\".chart[data-tag='loss']\").layout.paper_bgcolor",
        )
        assert paper == "#1e2326"
        driver.execute_script("window.scrollTo(0, 0)")
        screenshot(driver, tmp_path, "ui-dark.png")
        driver.find_element(By.ID, "theme").click()  # auto -> light
        wait_for(lambda: _js(driver, "return document.documentElement.dataset.theme") == "light")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

        # Runs that come and go: a removed run leaves the page, a new one is listed and charted.
        wait_ready(driver, "runs")
        rows = get_json(url + "api/runs")[1]["rows"]
        gone = next(r["id"] for r in rows if r["name"] == "seed3")
        cli = [sys.executable, "-m", "memostore_cli.main", "--store", str(store)]
        subprocess.run([*cli, "rm", gone], check=True, capture_output=True, timeout=60)
        wait_for(lambda: gone not in _rows(driver), 30)
        assert not _js(driver, "return ms.table.selected.has(arguments[0])", gone)
        chart = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='loss']")
        wait_for(lambda: chart.get_attribute("data-series") == "3")
        _run(script, store, "4")
        wait_for(lambda: len(_rows(driver)) == 4, 30)
        new = next(r["id"] for r in get_json(url + "api/runs")[1]["rows"] if r["name"] == "seed4")
        # Listed first, then selected when the listing is read: wait for both.
        wait_for(lambda: _js(driver, "return ms.table.selected.has(arguments[0])", new), 30)
        wait_for(lambda: chart.get_attribute("data-series") == "4")
