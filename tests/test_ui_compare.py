"""`memostore ui` comparing runs: scalars with TensorBoard's tooltip and smoothing, every kind
across runs, HParams views, following new runs; through the API and in headless Chromium."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script
from ui_support import browser as open_browser
from ui_support import get_json, screenshot, ui_server, wait_for, wait_ready

pytest.importorskip("starlette")
pytest.importorskip("tensorboard")  # add_graph traces with torch's tensorboard code

SEED = """
    import math
    import numpy as np
    import torch
    from memostore import memo, SummaryWriter


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 16)
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Sequential(Block(), torch.nn.Dropout(0.1))
            self.norm = torch.nn.BatchNorm1d(16)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.norm(self.enc(x)))


    def picture(lr, seed, step):
        # Rings whose spacing follows lr, a colour per seed, turning with the step.
        y, x = np.mgrid[-1:1:24j, -1:1:24j]
        rings = 0.5 + 0.5 * np.cos(np.hypot(x, y) * (8 + 300 * lr) - step / 15)
        tint = [(1.0, 0.45, 0.1), (0.2, 0.6, 1.0), (0.3, 0.9, 0.4)][seed % 3]
        return np.stack([rings * c for c in tint]).astype(np.float32)


    @memo
    def prepare(n: int):
        return list(range(n))


    @memo
    def train(lr: float, seed: int, steps: int = 120):
        rng = np.random.default_rng(seed)
        writer = SummaryWriter()
        writer.add_graph(Net().eval(), torch.zeros(4, 8))
        for step in range(steps):
            noise = rng.normal(0, 0.05)
            writer.add_scalar("train/loss", math.exp(-lr * step) + noise + 0.1 * seed, step)
            writer.add_scalar("train/acc", 1 - 0.9 * math.exp(-lr * step) + noise / 4, step)
            if step % 10 == 0:
                writer.add_scalar("val/loss", 1.1 * math.exp(-lr * step) + 0.1 * seed, step)
                writer.add_scalar("val/acc", 1 - math.exp(-lr * step), step)
            writer.add_scalar("lr", lr * 0.99**step, step)
            if step % 40 == 0:
                writer.add_image("samples", picture(lr, seed, step), step)
                writer.add_histogram("weights", rng.normal(step / 40, 1 + seed * 0.3, 400), step)
                writer.add_text("notes", f"lr={lr} seed={seed} at step {step}", step)
                labels = np.array([0, 1] * 32)
                scores = np.clip(labels * (0.2 + step / 300) + rng.uniform(0, 0.6, 64), 0, 1)
                writer.add_pr_curve("pr", labels, scores, step, num_thresholds=21)
        optimizer = "sgd" if seed % 2 else "adam"
        final = 1 - math.exp(-lr * steps) - 0.02 * seed
        writer.add_hparams({"lr": lr, "optimizer": optimizer}, {"hparam/val_acc": final})
        writer.close()
        return lr


    prepare(3)
    for lr, seed in ((0.01, 0), (0.03, 1), (0.05, 2)):
        train(lr, seed)
"""

RUNS = ((0.01, 0), (0.03, 1), (0.05, 2))
# TensorBoard's smoothing, written out here from its definition (a debiased EMA).
WEIGHT = 0.6


def tb_ema(values: list[float], weight: float) -> list[float]:
    last, out = 0.0, []
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return out


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-compare")
    store = root / "store"
    run_script(write_script(root, "seed.py", SEED), env={"MEMOSTORE_DIR": str(store)})
    return store


@pytest.fixture(scope="module")
def server(seeded: Path) -> str:
    with ui_server(seeded) as url:
        yield url


def _trains(url: str) -> list[dict[str, Any]]:
    rows = get_json(url + "api/runs")[1]["rows"]
    return sorted(
        (r for r in rows if r["function"].endswith("train")), key=lambda r: r["args"]["lr"]
    )


# -- the API ----------------------------------------------------------------------------------
def test_chart_api_sends_tensorboards_smoothing_over_the_raw_values(server: str) -> None:
    ids = [r["id"] for r in _trains(server)]
    query = f"api/chart?tag=train/loss&ids={','.join(ids)}&buckets=400"
    raw = get_json(server + query)[1]["series"]
    smooth = get_json(server + query + f"&smooth=ema&weight={WEIGHT}")[1]["series"]
    for plain, smoothed in zip(raw, smooth, strict=True):
        assert "raw" not in plain and plain["x"] == list(range(120))
        assert smoothed["raw"] == plain["y"]  # the logged values, drawn faded behind
        assert smoothed["y"] == pytest.approx(tb_ema(plain["y"], WEIGHT), rel=1e-12)
        # Wall times: the run's first point, and each point's offset from it.
        assert smoothed["rel"][0] == 0.0 and smoothed["start"] > 1.6e9
        assert all(b >= a for a, b in zip(smoothed["rel"], smoothed["rel"][1:], strict=False))
    # A recorded series held whole gets nothing more, smoothed or not.
    held = get_json(server + query + f"&smooth=ema&weight=0.6&after={ids[0]}:120")[1]
    assert held["series"][0]["append"] and held["series"][0]["x"] == []


def test_tag_api_gives_one_tag_of_every_run_that_logged_it(server: str) -> None:
    rows = get_json(server + "api/runs")[1]["rows"]
    prepare = next(r["id"] for r in rows if r["function"].endswith("prepare"))
    ids = [r["id"] for r in _trains(server)]
    data = get_json(server + f"api/tag?ids={','.join([*ids, prepare])}&tag=samples")[1]
    assert [r["id"] for r in data["runs"]] == ids  # prepare logged no images: left out
    for run in data["runs"]:
        assert run["kind"] == "image" and [e["step"] for e in run["events"]] == [0, 40, 80]
        event = run["events"][-1]
        assert event["width"] == 24 and "blob" not in event
        with __import__("urllib.request").request.urlopen(
            server + f"api/media?id={run['id']}&tag=samples&i={event['media']}"
        ) as response:
            assert response.read()[:8] == b"\x89PNG\r\n\x1a\n"
    assert get_json(server + "api/tag?ids=../x&tag=samples")[0] == 400


def test_graph_api_is_a_module_tree_with_shapes(server: str) -> None:
    train = _trains(server)[0]
    status, tree = get_json(server + f"api/graph?id={train['id']}&tag=__graph__")
    assert status == 200
    assert tree["inputs"] == [{"name": "x", "shape": [4, 8]}]
    assert [o["shape"] for o in tree["outputs"]] == [[4, 3]]
    root = tree["root"]
    assert root["type"] == "Net" and root["inputs"] == [[4, 8]] and root["outputs"] == [[4, 3]]
    modules = {m["path"]: m for m in _walk(root)}
    assert set(modules) >= {"enc", "enc.0", "enc.0.fc", "enc.0.act", "enc.1", "norm", "head"}
    fc = modules["enc.0.fc"]
    assert fc["type"] == "Linear" and fc["inputs"] == [[4, 8]] and fc["outputs"] == [[4, 16]]
    assert [(p["name"], p["shape"]) for p in fc["parameters"]] == [
        ("weight", [16, 8]),
        ("bias", [16]),
    ]
    assert [op["op"] for op in fc["ops"]] == ["aten::linear"]
    norm = {p["name"]: p for p in modules["norm"]["parameters"]}
    assert norm["running_mean"]["role"] == "buffer" and norm["running_mean"]["shape"] == [16]
    assert modules["enc"]["count"] == 3  # linear, relu, dropout
    assert get_json(server + f"api/graph?id={train['id']}&tag=samples")[0] == 404


def _walk(module: dict[str, Any]) -> list[dict[str, Any]]:
    return [module, *(m for child in module["modules"] for m in _walk(child))]


def test_graph_reader_refuses_malformed_bytes() -> None:
    from memostore.ui.graphdef import parse_graph

    assert parse_graph(b"") == []
    for damaged in (b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05ab", b"\x0f", b"\x0a\x02\x0a\x80"):
        with pytest.raises(ValueError):
            parse_graph(damaged)


def test_hparams_api_gives_what_add_hparams_recorded(server: str) -> None:
    ids = [r["id"] for r in _trains(server)]
    runs = get_json(server + f"api/hparams?ids={','.join(ids)}")[1]["runs"]
    assert [runs[i]["hparams"] for i in ids] == [
        {"lr": 0.01, "optimizer": "adam"},
        {"lr": 0.03, "optimizer": "sgd"},
        {"lr": 0.05, "optimizer": "adam"},
    ]
    assert all(runs[i]["metrics"] == ["hparam/val_acc"] for i in ids)


# -- the browser ----------------------------------------------------------------------------
def _cells(driver: Any) -> list[dict[str, str]]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#tooltip tbody tr')].map(tr => ({...tr.dataset,"
        " name: tr.querySelector('.name').textContent}))"
    )


def _hover(driver: Any, chart: Any, dx: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element_with_offset(chart, dx, 0).perform()


@pytest.mark.slow
def test_scalars_tooltip_smoothing_tags_pins_downloads(server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    trains = _trains(server)
    raw = {
        s["id"]: s
        for s in get_json(
            server + f"api/chart?tag=train/loss&ids={','.join(r['id'] for r in trains)}&buckets=400"
        )[1]["series"]
    }
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with open_browser() as driver:
        driver.execute_cdp_cmd(
            "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
        )
        driver.get(server)
        wait_ready(driver, "runs")
        # TensorBoard's defaults: EMA at 0.6, the raw line faded behind the smoothed one.
        assert driver.find_element(By.ID, "smooth").get_attribute("value") == "ema"
        assert driver.execute_script("return ms.charts.settings.weight") == WEIGHT
        chart = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='train/loss']")
        traces = driver.execute_script(
            "return arguments[0].data.map(t => [t.uid, t.opacity === undefined ? 1 : t.opacity,"
            " t.line.color])",
            chart,
        )
        assert len(traces) == 6
        faded = [t for t in traces if t[0].startswith("raw_")]
        assert len(faded) == 3 and all(t[1] < 0.5 for t in faded)
        assert traces.index(faded[-1]) < 3  # drawn first: behind the smoothed lines
        assert {t[2] for t in faded} == {t[2] for t in traces if t[0].startswith("line_")}

        # The tooltip lists every run at the hovered step: smoothed, raw, step, times.
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
        _hover(driver, chart, 60)
        rows = wait_for(lambda: len(_cells(driver)) == 3 and _cells(driver))
        assert {r["id"] for r in rows} == set(raw)
        for row in rows:
            series, step = raw[row["id"]], int(row["step"])
            assert float(row["value"]) == pytest.approx(series["y"][step], rel=1e-9)
            expected = tb_ema(series["y"], WEIGHT)[step]
            assert float(row["smoothed"]) == pytest.approx(expected, rel=1e-9)
            assert float(row["relative"]) == pytest.approx(series["rel"][step], abs=1e-3)
            assert float(row["wall"]) == pytest.approx(series["start"] + series["rel"][step])
        names = [r["name"] for r in rows]
        # Named by the arguments that differ among the runs shown.
        assert sorted(names) == [f"train lr={lr} seed={s} optimizer={o}" for (lr, s), o in
                                 zip(RUNS, ("adam", "sgd", "adam"), strict=True)]  # fmt: skip
        # Sorted as asked: highest smoothed value first.
        driver.execute_script(
            "const s = document.getElementById('tooltip-sort'); s.value = 'descending';"
            "s.dispatchEvent(new Event('change'))"
        )
        _hover(driver, chart, 10)
        _hover(driver, chart, 80)
        rows = wait_for(lambda: len(_cells(driver)) == 3 and _cells(driver))
        smoothed = [float(r["smoothed"]) for r in rows]
        assert smoothed == sorted(smoothed, reverse=True)
        if os.environ.get("MEMOSTORE_UI_SCREENSHOTS"):
            _scalars_screenshot(driver, tmp_path)

        # Tag groups by prefix, a regular expression over tags, collapsing a group.
        groups = driver.execute_script(
            "return [...document.querySelectorAll('#charts .group')].map(g => [g.dataset.group,"
            " [...g.querySelectorAll('.card')].map(c => c.dataset.tag)])"
        )
        assert groups == [
            ["train", ["train/acc", "train/loss"]],
            ["val", ["val/acc", "val/loss"]],
            ["", ["lr"]],
            ["hparam", ["hparam/val_acc"]],
        ]
        _type(driver, "tag-filter", "^val/|^lr$")
        wait_for(lambda: _shown_tags(driver) == ["val/acc", "val/loss", "lr"])
        _type(driver, "tag-filter", "acc(")
        wait_for(
            lambda: "invalid" in driver.find_element(By.ID, "tag-filter").get_attribute("class")
        )
        _type(driver, "tag-filter", "")
        driver.find_element(By.CSS_SELECTOR, "details.group[data-group='train'] > summary").click()
        wait_for(
            lambda: (
                not driver.find_element(
                    By.CSS_SELECTOR, ".chart[data-tag='train/acc']"
                ).is_displayed()
            )
        )

        # Pinned: at the top, whatever the filter, and still after a reload.
        driver.find_element(By.CSS_SELECTOR, ".card[data-tag='val/loss'] button.pin").click()
        wait_for(lambda: _section_of(driver, "val/loss") == "pinned")
        _type(driver, "tag-filter", "^lr$")
        wait_for(lambda: _shown_tags(driver) == ["val/loss", "lr"])
        _type(driver, "tag-filter", "")
        driver.refresh()
        wait_ready(driver, "runs")
        assert _section_of(driver, "val/loss") == "pinned"
        first = driver.find_element(By.CSS_SELECTOR, "#charts .group")
        assert first.get_attribute("data-group") == "pinned"

        # Downloads: exactly the points drawn, per run, smoothed and raw.
        card = driver.find_element(By.CSS_SELECTOR, ".card[data-tag='val/loss']")
        card.find_element(By.CSS_SELECTOR, "button.csv").click()
        card.find_element(By.CSS_SELECTOR, "button.json").click()
        got_csv = wait_for(lambda: _downloaded(downloads, "val_loss.csv"))
        got_json = wait_for(lambda: _downloaded(downloads, "val_loss.json"))
        drawn = driver.execute_script(
            "return arguments[0].data.map(t => [t.uid, t.y])",
            driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='val/loss']"),
        )
        lines = {uid.split("_", 1)[1]: y for uid, y in drawn if uid.startswith("line_")}
        faded = {uid.split("_", 1)[1]: y for uid, y in drawn if uid.startswith("raw_")}
        table = list(csv.DictReader(io.StringIO(got_csv)))
        assert set(table[0]) == {
            "run",
            "name",
            "step",
            "wall_time",
            "relative_s",
            "value",
            "smoothed",
        }
        for run_id, line in lines.items():
            mine = [r for r in table if r["run"] == run_id]
            assert [float(r["smoothed"]) for r in mine] == pytest.approx(line, rel=1e-12)
            assert [float(r["value"]) for r in mine] == pytest.approx(faded[run_id], rel=1e-12)
            assert [int(r["step"]) for r in mine] == list(range(0, 120, 10))
        document = json.loads(got_json)
        assert document["tag"] == "val/loss" and document["smoothing"] == {
            "mode": "ema",
            "weight": 0.6,
        }
        for run in document["runs"]:
            assert run["smoothed"] == pytest.approx(lines[run["id"]], rel=1e-12)
            assert run["value"] == pytest.approx(faded[run["id"]], rel=1e-12)


def _scalars_screenshot(driver: Any, tmp_path: Path) -> None:
    """The legend, the train/ charts and the tooltip, for docs/images/ui-scalars.png."""
    from selenium.webdriver.common.by import By

    hparam = "details.group[data-group='hparam'] > summary"
    driver.find_element(By.CSS_SELECTOR, hparam).click()  # folded: the train/ charts come first
    bar = driver.find_element(By.CSS_SELECTOR, ".panel-bar")
    driver.execute_script("arguments[0].scrollIntoView()", bar)
    chart = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='train/loss']")
    _hover(driver, chart, -120)
    _hover(driver, chart, -60)
    wait_for(lambda: driver.find_element(By.ID, "tooltip").is_displayed())
    time.sleep(0.3)
    _shot(driver, tmp_path, "ui-scalars.png", "details.group[data-group='train']", scroll=False)
    wait_for(lambda: driver.find_element(By.CSS_SELECTOR, hparam)).click()


def _shot(driver: Any, tmp_path: Path, name: str, last: str, scroll: bool = True) -> None:
    """For docs/images (when $MEMOSTORE_UI_SCREENSHOTS is set): the window from the tabs down to
    the bottom of the element *last*, cropped so the image stays small."""
    if not os.environ.get("MEMOSTORE_UI_SCREENSHOTS"):
        return
    if scroll:
        driver.execute_script("document.querySelector('.panel-bar').scrollIntoView()")
        time.sleep(0.3)
    top, bottom = driver.execute_script(
        "return [document.querySelector('.panel-bar').getBoundingClientRect().top,"
        " document.querySelector(arguments[0]).getBoundingClientRect().bottom]",
        last,
    )
    screenshot(driver, tmp_path, name, rows=(int(top) - 6, int(bottom) + 8))


def _type(driver: Any, element_id: str, text: str) -> None:
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'))",
        element_id,
        text,
    )


def _shown_tags(driver: Any) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#charts .card')].map(c => c.dataset.tag)"
    )


def _section_of(driver: Any, tag: str) -> str:
    return driver.execute_script(
        "const card = document.querySelector(`#charts .card[data-tag='${arguments[0]}']`);"
        "return card ? card.closest('.group').dataset.group : null",
        tag,
    )


def _downloaded(directory: Path, name: str) -> str | None:
    path = directory / name
    return path.read_text() if path.exists() and path.stat().st_size else None


@pytest.mark.slow
def test_run_colours_stay_distinct_for_30_runs_and_follow_the_run(server: str) -> None:
    with open_browser() as driver:
        driver.get(server)
        wait_ready(driver, "runs")
        palette = driver.execute_script("return ms.palette")
        assert len(palette) == 30 and len(set(palette)) == 30
        assert _min_distance(palette) > 25  # CIELAB ΔE: no two look alike
        colours = driver.execute_script(
            "const ids = Array.from({length: 30},"
            " (_, i) => (i * 7919).toString(16).padStart(64, 'a'));"
            "ms.assignColors(ids); return ids.map(ms.colorOf)"
        )
        assert len(set(colours)) == 30
        # By id, not by position: deselecting the other runs keeps a run's colour.
        ids = driver.execute_script("return [...ms.table.selected]")
        before = driver.execute_script("return arguments[0].map(ms.colorOf)", ids)
        driver.execute_script(
            "ms.table.selected = new Set([arguments[0]]); ms.table.onSelect()", ids[-1]
        )
        wait_for(lambda: driver.execute_script("return ms.charts.ids.length") == 1)
        assert driver.execute_script("return ms.colorOf(arguments[0])", ids[-1]) == before[-1]
        driver.refresh()
        wait_ready(driver, "runs")
        assert driver.execute_script("return arguments[0].map(ms.colorOf)", ids) == before


def _min_distance(colours: list[str]) -> float:
    import numpy as np

    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in colours]) / 255.0
    linear = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    matrix = np.array(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    )
    xyz = linear @ matrix.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    lab = np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], 1)
    distance = np.linalg.norm(lab[:, None] - lab[None], axis=2) + np.eye(len(colours)) * 1e9
    return float(distance.min())


def _open_tab(driver: Any, tab: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f".tab[data-tab='{tab}']").click()
    script = "return document.getElementById('kind-panel').dataset.ready"
    wait_for(lambda: driver.execute_script(script) == tab)


@pytest.mark.slow
def test_images_histograms_text_pr_curves_and_graph_across_runs(
    server: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ids = [r["id"] for r in _trains(server)]
    with open_browser() as driver:
        driver.get(server)
        wait_ready(driver, "runs")
        counts = driver.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('.tab')]"
            ".map(t => [t.dataset.tab, (t.querySelector('.count') || {}).textContent]))"
        )
        assert counts == {"scalars": "6", "images": "1", "audio": "0", "histograms": "1",
                          "text": "1", "pr": "1", "custom": "0", "graph": "3",
                          "hparams": None}  # fmt: skip

        # Images: one card per run, side by side, at the step the slider picks.
        _open_tab(driver, "images")
        cards = driver.find_elements(By.CSS_SELECTOR, ".media-card")
        assert sorted(c.get_attribute("data-id") for c in cards) == sorted(ids)
        assert {c.get_attribute("data-step") for c in cards} == {"80"}
        img = cards[0].find_element(By.TAG_NAME, "img")
        wait_for(lambda: driver.execute_script("return arguments[0].naturalWidth", img) == 24)
        assert img.size["width"] >= 200  # a 24-pixel image, scaled up to be readable
        first_src = img.get_attribute("src")
        slider = driver.find_element(By.CSS_SELECTOR, ".kind-tag[data-tag='samples'] .step-slider")
        driver.execute_script(
            "arguments[0].value = '0'; arguments[0].dispatchEvent(new Event('input'))", slider
        )
        assert {c.get_attribute("data-step") for c in cards} == {"0"}
        assert img.get_attribute("src") != first_src
        driver.execute_script(
            "arguments[0].value = '2'; arguments[0].dispatchEvent(new Event('input'))", slider
        )
        _shot(driver, tmp_path, "ui-media.png", ".kind-tag[data-tag='samples']")
        img.click()  # full size, over the page; Escape closes it
        box = wait_for(lambda: driver.find_element(By.ID, "lightbox"))
        wait_for(lambda: box.get_attribute("data-scale"))
        assert float(box.get_attribute("data-scale")) >= 10
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
        wait_for(lambda: not driver.find_elements(By.ID, "lightbox"))

        # Histograms: per run, offset (a filled outline per step), overlay, distribution.
        _open_tab(driver, "histograms")
        charts = driver.find_elements(By.CSS_SELECTOR, ".kind-tag[data-tag='weights'] .chart")
        assert len(charts) == 3
        fills = driver.execute_script("return arguments[0].data.map(t => t.fill)", charts[0])
        assert fills == ["toself"] * 3
        _shot(driver, tmp_path, "ui-histograms.png", ".kind-tag[data-tag='weights']")
        for mode, traces in (("overlay", 3), ("distribution", 9)):
            driver.execute_script(
                "const s = document.getElementById('hist-mode'); s.value = arguments[0];"
                "s.dispatchEvent(new Event('change'))",
                mode,
            )
            wait_for(lambda m=mode: driver.execute_script(
                "const c = document.querySelector(\".kind-tag[data-tag='weights'] .chart\");"
                "return c && c.dataset.mode === arguments[0] && c.dataset.drawn", m))  # fmt: skip
            chart = driver.find_element(By.CSS_SELECTOR, ".kind-tag[data-tag='weights'] .chart")
            assert len(driver.execute_script("return arguments[0].data", chart)) == traces
        _shot(driver, tmp_path, "ui-distributions.png", ".kind-tag[data-tag='weights']")
        # The bands are percentiles of each step's values: the median follows the mean
        # the script drew from (step / 40), the outer band spans min to max.
        median = driver.execute_script(
            "return arguments[0].data[8]",
            driver.find_element(By.CSS_SELECTOR, ".kind-tag[data-tag='weights'] .chart"),
        )
        assert median["x"] == [0, 40, 80]
        assert median["y"] == pytest.approx([0.0, 1.0, 2.0], abs=0.25)

        # Text and PR curves: every run, at the step of the slider.
        _open_tab(driver, "text")
        texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".logged-text")]
        assert sorted(texts) == [f"lr={lr} seed={s} at step 80" for lr, s in RUNS]
        slider = driver.find_element(By.CSS_SELECTOR, ".kind-tag[data-tag='notes'] .step-slider")
        driver.execute_script(
            "arguments[0].value = '1'; arguments[0].dispatchEvent(new Event('input'))", slider
        )
        texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".logged-text")]
        assert all(t.endswith("at step 40") for t in texts)
        _open_tab(driver, "pr")
        pr = driver.find_element(By.CSS_SELECTOR, ".chart.pr")
        assert pr.get_attribute("data-step") == "80"
        curves = driver.execute_script("return arguments[0].data.map(t => t.line.color)", pr)
        assert len(set(curves)) == 3
        last = driver.execute_script("return arguments[0].data[0].y", pr)
        slider = driver.find_element(By.CSS_SELECTOR, ".kind-tag[data-tag='pr'] .step-slider")
        driver.execute_script(
            "arguments[0].value = '0'; arguments[0].dispatchEvent(new Event('input'))", slider
        )
        wait_for(lambda: pr.get_attribute("data-step") == "0")
        assert driver.execute_script("return arguments[0].data[0].y", pr) != last

        # The graph: a module tree; a module shows its parameters and shapes.
        _open_tab(driver, "graph")
        tree = driver.find_element(By.ID, "graph-tree")
        fc = tree.find_element(By.CSS_SELECTOR, "details[data-path='enc.0.fc']")
        assert not fc.is_displayed()  # depth 3: folded
        driver.find_element(By.XPATH, "//button[text()='expand all']").click()
        assert "Linear" in fc.text and "[4, 8] → [4, 16]" in fc.text
        assert "weight [16, 8] float32" in fc.text.replace("\n", " ")
        if os.environ.get("MEMOSTORE_UI_SCREENSHOTS"):
            screenshot(driver, tmp_path, "ui-graph.png", driver.find_element(By.ID, "kind-panel"))
        # The evaluation's own page draws its graph the same way.
        driver.get(server + f"#/eval/{ids[0]}")
        wait_ready(driver, "eval")
        graph = driver.find_element(By.CSS_SELECTOR, ".tag-view[data-kind='graph'] #graph-tree")
        assert graph.find_elements(By.CSS_SELECTOR, "details[data-path='enc.0.fc']")


@pytest.mark.slow
def test_hparams_parallel_coordinates_and_scatter_over_the_filtered_runs(
    server: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(server + "#/runs/hparams")
        wait_ready(driver, "runs")
        wait_for(lambda: driver.find_element(By.ID, "parcoords").get_attribute("data-runs"))
        dims = driver.execute_script(
            "return document.getElementById('parcoords').data[0].dimensions"
            ".map(d => [d.label, d.values, d.ticktext || null])"
        )
        assert [d[0] for d in dims] == ["lr", "optimizer", "seed", "hparam/val_acc"]
        lr, optimizer, _, metric = dims
        order = sorted(range(3), key=lambda i: lr[1][i])
        assert [lr[1][i] for i in order] == [0.01, 0.03, 0.05]
        assert [optimizer[2][optimizer[1][i]] for i in order] == ["adam", "sgd", "adam"]
        expected = [1 - math.exp(-lr * 120) - 0.02 * s for lr, s in RUNS]
        assert [metric[1][i] for i in order] == pytest.approx(expected)
        scatters = driver.find_elements(By.CSS_SELECTOR, "#scatters .chart")
        assert [s.get_attribute("data-hparam") for s in scatters] == ["lr", "optimizer", "seed"]
        points = driver.execute_script("return arguments[0].data[0]", scatters[0])
        assert sorted(points["x"]) == [0.01, 0.03, 0.05]
        _shot(driver, tmp_path, "ui-hparams.png", "#scatters")
        # Over the runs the table lets through: filtering it redraws the views.
        _type(driver, "filter-args", "lr<0.04")
        wait_for(lambda: driver.find_element(By.ID, "parcoords").get_attribute("data-runs") == "2")
        # Another metric: any scalar, as the scatter's y.
        driver.execute_script(
            "const s = document.getElementById('hparams-metric'); s.value = 'val/loss';"
            "s.dispatchEvent(new Event('change'))"
        )
        wait_for(lambda: "val/loss" in driver.find_element(By.ID, "kind-panel").text)


LIVE = """
    import os, sys, time
    from memostore import memo, SummaryWriter

    @memo
    def train(seed: int, stop: str):
        writer = SummaryWriter()
        step = 0
        deadline = time.time() + 90
        while step < 3 or (not os.path.exists(stop) and time.time() < deadline):
            writer.add_scalar("loss", 1.0 / (step + 1) + seed, step)
            writer.flush()
            step += 1
            time.sleep(0.1)
        writer.close()
        return seed

    train(int(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.slow
def test_new_runs_of_the_functions_shown_are_charted_without_a_click(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    script = write_script(tmp_path, "live.py", LIVE)
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    done = tmp_path / "done"
    done.write_text("")
    subprocess.run([sys.executable, str(script), "0", str(done)], env=env, check=True, timeout=120)

    def start(seed: int, stop: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(script), str(seed), str(stop)], env=env)

    with ui_server(store) as url, open_browser() as driver:
        driver.get(url + "?refresh=1000#/")
        wait_ready(driver, "runs")
        assert driver.find_element(By.ID, "follow").is_selected()  # on by default
        chart = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='loss']")
        assert chart.get_attribute("data-series") == "1"
        stop = tmp_path / "stop1"
        writer = start(1, stop)
        try:
            # Started after the page opened: listed, selected and charted, no click.
            wait_for(lambda: chart.get_attribute("data-series") == "2", 60)
            running = driver.execute_script(
                "return ms.table.rows.filter(r => r.status === 'running').map(r => r.id)"
            )
            assert len(running) == 1 and driver.execute_script(
                "return ms.table.selected.has(arguments[0])", running[0]
            )
            colour = driver.execute_script("return ms.colorOf(arguments[0])", running[0])
            grown = driver.execute_script("return arguments[0].data.at(-1).x.length", chart)
            wait_for(
                lambda: (
                    driver.execute_script("return arguments[0].data.at(-1).x.length", chart) > grown
                ),
                10,
            )
        finally:
            stop.write_text("")
            writer.wait(timeout=60)

        # Ended: its record takes its place in the chart, in the same colour.
        def recorded() -> list[str]:
            return driver.execute_script(
                "return [...ms.table.selected].filter(id => id.length === 64)"
            )

        wait_for(lambda: len(recorded()) == 2, 30)
        wait_for(lambda: chart.get_attribute("data-series") == "2", 10)
        ended = [i for i in recorded() if driver.execute_script(
            "return ms.table.byId.get(arguments[0]).args.seed === 1", i)]  # fmt: skip
        assert driver.execute_script("return ms.colorOf(arguments[0])", ended[0]) == colour

        # Following off: a new run is listed but not charted.
        driver.find_element(By.ID, "follow").click()
        stop = tmp_path / "stop2"
        writer = start(2, stop)
        try:
            wait_for(lambda: driver.execute_script(
                "return ms.table.rows.some(r => r.status === 'running')"), 60)  # fmt: skip
            time.sleep(1.5)  # a refresh or two
            assert chart.get_attribute("data-series") == "2"
        finally:
            stop.write_text("")
            writer.wait(timeout=60)


HOSTILE = '<img src=x onerror="window.__xss=1">&amp;<b>bold</b>'
# Markdown, as add_text's text is shown: links to other schemes than http, https and mailto
# (however spelled) and HTML are shown as text, the rest is laid out.
MARKDOWN = (
    "# Notes\n\n**bold** [safe](https://example.com/ok) [js](javascript:top.pwned=1) "
    "[upper]( JaVaScRiPt:top.pwned=1) [data](data:text/html;base64,PHNjcmlwdD4=) "
    "[vb](vbscript:top.pwned=1) <script>top.pwned=1</script>\n\n"
    "| a | b |\n|---|---|\n| `x` | *y* |\n\n- one\n- two"
)

PROBE = f"""
    import numpy as np
    from memostore import memo, SummaryWriter

    HOSTILE = {HOSTILE!r}
    MARKDOWN = {MARKDOWN!r}

    @memo
    def probe(note: str):
        writer = SummaryWriter()
        for step in range(3):
            writer.add_scalar(HOSTILE, float(step), step)
            writer.add_text(HOSTILE, HOSTILE, step)
            writer.add_text("notes", MARKDOWN, step)
            writer.add_image(HOSTILE, np.zeros((3, 4, 4), dtype=np.float32), step)
        writer.add_hparams({{HOSTILE: HOSTILE, "lr": 0.1}}, {{"hparam/" + HOSTILE: 1.0}})
        writer.close()
        return note

    probe(HOSTILE)
    probe("plain")
"""


@pytest.mark.slow
def test_hostile_tags_names_and_text_stay_text(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    run_script(write_script(tmp_path, "probe.py", PROBE), env={"MEMOSTORE_DIR": str(store)})
    with ui_server(store) as url, open_browser() as driver:
        driver.get(url)
        wait_ready(driver, "runs")
        chart = driver.execute_script(
            "return [...document.querySelectorAll('.card .chart')]"
            ".find(c => c.dataset.tag === arguments[0])",
            HOSTILE,
        )
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
        _hover(driver, chart, 20)
        wait_for(lambda: len(_cells(driver)) == 2)
        assert HOSTILE in driver.find_element(By.ID, "tooltip").text
        # The differing argument names the run, cut to a name's length: still as text.
        assert any(HOSTILE[:20] in r["name"] for r in _cells(driver))
        for tab in ("images", "text", "hparams"):
            _open_tab(driver, tab)
            assert HOSTILE in driver.find_element(By.ID, "kind-panel").text
        labels = driver.execute_script(
            "return document.getElementById('parcoords').data[0].dimensions.map(d => d.label)"
        )
        assert any("&lt;img" in label for label in labels)  # plotly shows escaped text as text
        texts = driver.execute_script(
            "return [...document.querySelectorAll('#parcoords text')].map(t => t.textContent)"
        )
        assert any(HOSTILE in t for t in texts)
        assert not driver.find_elements(By.CSS_SELECTOR, "#view img[src='x'], #view b")
        assert driver.execute_script("return window.__xss") is None

        # Markdown text: laid out, its links to other schemes and its HTML left as text.
        _open_tab(driver, "text")
        notes = driver.find_elements(By.CSS_SELECTOR, ".kind-tag[data-tag='notes'] .markdown")
        assert len(notes) == 2
        note = notes[0]
        assert note.find_element(By.TAG_NAME, "h1").text == "Notes"
        assert note.find_element(By.TAG_NAME, "strong").text == "bold"
        cells = note.find_elements(By.CSS_SELECTOR, "table td")
        assert [c.text for c in cells] == ["x", "y"]
        assert cells[0].find_element(By.TAG_NAME, "code").text == "x"
        assert cells[1].find_element(By.TAG_NAME, "em").text == "y"
        assert [li.text for li in note.find_elements(By.TAG_NAME, "li")] == ["one", "two"]
        links = driver.execute_script(
            "return [...document.querySelectorAll('#view a[href]')].map(a => a.href)"
            ".filter(h => !h.startsWith(location.origin))"
        )
        assert links == ["https://example.com/ok"] * 2
        unsafe = [e.text for e in note.find_elements(By.CSS_SELECTOR, ".unsafe-link")]
        assert unsafe == ["js", "upper", "data", "vb"]
        assert "<script>top.pwned=1</script>" in note.text
        assert not driver.find_elements(By.CSS_SELECTOR, "#view script")
        for span in note.find_elements(By.CSS_SELECTOR, ".unsafe-link"):
            span.click()
        assert driver.execute_script("return window.pwned") is None


MANY_TAGS = """
    from memostore import memo, SummaryWriter

    @memo
    def sweep(seed: int):
        writer = SummaryWriter()
        for step in range(5):
            for k in range(16):
                writer.add_scalar(f"layer{k:02d}/norm", seed + k + step, step)
        writer.close()
        return seed

    sweep(0)
    sweep(1)
"""


@pytest.mark.slow
def test_charts_below_the_first_dozen_are_drawn_when_scrolled_near(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    run_script(write_script(tmp_path, "many.py", MANY_TAGS), env={"MEMOSTORE_DIR": str(store)})
    with ui_server(store) as url, open_browser() as driver:
        driver.get(url)
        wait_ready(driver, "runs")
        charts = driver.find_elements(By.CSS_SELECTOR, "#charts .chart")
        assert len(charts) == 16

        def drawn() -> list[bool]:
            return driver.execute_script("return arguments[0].map(c => !!c.data)", charts)

        assert drawn()[:12] == [True] * 12 and drawn()[-1] is False
        driver.execute_script("arguments[0].scrollIntoView()", charts[-1])
        wait_for(lambda: all(drawn()))
        assert charts[-1].get_attribute("data-series") == "2"
