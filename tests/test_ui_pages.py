"""`memostore ui`: the evaluation, diff and lineage pages, and a live run, in headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_script, write_script
from ui_support import browser as open_browser
from ui_support import get_json, screenshot, ui_server, wait_for, wait_ready

pytest.importorskip("starlette")

SEED = """
    import numpy as np
    from memostore import memo, SummaryWriter

    SCALE = 2.0

    def helper(x):
        return x * SCALE

    @memo
    def prepare(n: int):
        return np.arange(n, dtype=np.float64)

    @memo
    def train(data, lr: float, epochs: int = 3):
        writer = SummaryWriter()
        for step in range(50):
            writer.add_scalar("loss", helper(lr) / (step + 1), step)
            writer.add_histogram("weights", np.linspace(-lr, lr, 40) * (step + 1), step)
        writer.add_text("note", f"trained with lr={lr}", 0)
        writer.add_image("sample", np.full((3, 6, 6), 0.5, dtype=np.float32), 0)
        writer.add_hparams({"lr": lr, "opt": "sgd"}, {"hparam/final": 0.25})
        labels = np.array([0, 0, 1, 1, 0, 1, 1, 0] * 4)
        for step in range(3):
            # Better scores step after step: the curves differ per step.
            scores = np.clip(labels * (0.3 + 0.2 * step) + np.linspace(0, 0.5, 32), 0, 1)
            writer.add_pr_curve("pr", labels, scores, step, num_thresholds=11)
        # Two clusters far apart along one direction of 5: PCA's first axis splits them.
        rng = np.random.default_rng(0)
        points = rng.normal(0, 0.1, (40, 5))
        points[20:, 2] += 10.0
        writer.add_embedding(points, metadata=["near"] * 20 + ["far"] * 20, tag="points")
        clip = np.sin(np.linspace(0, 2 * np.pi * 440, 8000)).astype(np.float32) * 0.5
        writer.add_audio("clip", clip, 0, sample_rate=8000)
        writer.close()
        return data * lr

    data = prepare(8)
    for lr in (0.1, 0.2):
        train(data, lr)
    train(data, 0.2, epochs=5)
"""

LIVE = """
    import os, sys, time
    from memostore import SummaryWriter

    stop = sys.argv[1]
    writer = SummaryWriter()
    step = 0
    deadline = time.time() + 90
    while not os.path.exists(stop) and time.time() < deadline:
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.flush()
        step += 1
        time.sleep(0.1)
    writer.close()
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-pages")
    store = root / "store"
    run_script(write_script(root, "seed.py", SEED), env={"MEMOSTORE_DIR": str(store)})
    return store


@pytest.fixture(scope="module")
def server(seeded: Path) -> str:
    with ui_server(seeded) as url:
        yield url


def _trains(url: str) -> list[dict]:
    rows = get_json(url + "api/runs")[1]["rows"]
    return sorted(
        (r for r in rows if r["function"].endswith("train")),
        key=lambda r: (r["args"]["lr"], r["args"]["epochs"]),
    )


def test_evaluation_api_is_what_show_gives_plus_sources(server: str, seeded: Path) -> None:
    import json

    train = _trains(server)[0]
    status, page = get_json(server + f"api/eval/{train['id']}")
    assert status == 200
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "memostore_cli.main",
            "--store",
            str(seeded),
            "show",
            train["id"],
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(shown.stdout)
    for field in ("id", "function", "status", "key", "args", "result", "parents", "children"):
        assert page[field] == expected[field], field
    assert page["signer"] == expected["signer"] and page["signer"]["principal"] == "you"
    assert page["metrics"]["loss"]["count"] == expected["metrics"]["loss"]["count"] == 50
    sources = {d["symbol"]: d["source"] for d in page["code"]["dependencies"]}
    helper = next(s for name, s in sources.items() if name.endswith("helper"))
    assert "return x * SCALE" in helper
    assert page["logged_hparams"]["hparams"] == {"lr": 0.1, "opt": "sgd"}
    assert page["parents"] and page["parents"][0] in {
        r["id"] for r in get_json(server + "api/runs")[1]["rows"]
    }


@pytest.mark.slow
def test_evaluation_page_shows_code_media_histograms_text(server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    train = _trains(server)[0]
    with open_browser() as driver:
        driver.get(server + f"#/eval/{train['id']}")
        wait_ready(driver, "eval")
        text = driver.find_element(By.ID, "view").text
        for expected in ("arguments", "result", "provenance", "parents", "trained with lr=0.1"):
            assert expected in text
        assert "signed by you (SHA256:" in text
        kinds = [
            e.get_attribute("data-kind") for e in driver.find_elements(By.CSS_SELECTOR, ".tag-view")
        ]
        assert sorted(kinds) == [
            "audio", "embedding", "histogram", "image", "pr_curve", "text"
        ]  # fmt: skip
        image = driver.find_element(By.CSS_SELECTOR, ".tag-view[data-kind='image'] img")
        driver.execute_script("arguments[0].scrollIntoView()", image)  # loaded lazily
        wait_for(lambda: driver.execute_script("return arguments[0].naturalWidth", image) == 6)
        _check_drawn_kinds(driver)
        screenshot(driver, tmp_path, "ui-evaluation.png")
        if os.environ.get("MEMOSTORE_UI_SCREENSHOTS"):
            driver.set_window_size(1400, 3400)  # the logged kinds, whole
            time.sleep(0.5)  # plotly redraws its charts to the new size
            screenshot(
                driver, tmp_path, "ui-evaluation-kinds.png", driver.find_element(By.ID, "media")
            )
            driver.set_window_size(1400, 1000)
        assert (
            driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='loss']").get_attribute(
                "data-series"
            )
            == "1"
        )
        # The parent is a link to its own page.
        driver.find_element(By.CSS_SELECTOR, f"a[href='#/eval/{train['parents'][0]}']").click()
        wait_for(lambda: "prepare" in driver.find_element(By.TAG_NAME, "h1").text)
        wait_ready(driver, "eval")
        assert "prepare" in driver.find_element(By.TAG_NAME, "h1").text
        driver.back()
        wait_for(lambda: train["id"][:10] in driver.find_element(By.TAG_NAME, "h1").text)
        wait_ready(driver, "eval")
        # Would the next call hit? Checked against today's script, read, not run.
        driver.find_element(By.XPATH, "//button[starts-with(., 'check')]").click()
        wait_for(lambda: "would hit now" in driver.find_element(By.ID, "why").text)


def _drawn(driver: object, kind: str) -> object:
    """The plotly div of a tag view, once plotly has drawn it."""
    from selenium.webdriver.common.by import By

    selector = f".tag-view[data-kind='{kind}'] .chart"
    div = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, selector))  # type: ignore[attr-defined]
    wait_for(lambda: div.get_attribute("data-drawn"))
    return div


def _check_drawn_kinds(driver: object) -> None:
    """PR curve, embedding, histogram offset view and audio, as drawn in the page."""
    from selenium.webdriver.common.by import By

    run = driver.execute_script  # type: ignore[attr-defined]
    # Histograms: one filled outline per step, the last 30 of the 50 logged.
    ridge = _drawn(driver, "histogram")
    steps = run("return arguments[0].data.map(t => t.name)", ridge)
    assert steps == [f"step {s}" for s in range(20, 50)]
    assert run("return arguments[0].data.every(t => t.fill === 'toself')", ridge)
    # PR curve: the last step first; the slider shows another step's own curve.
    pr = _drawn(driver, "pr_curve")
    assert pr.get_attribute("data-step") == "2"
    last = run("return arguments[0].data[0].y", pr)
    slider = driver.find_element(By.CSS_SELECTOR, ".tag-view[data-kind='pr_curve'] .step-slider")  # type: ignore[attr-defined]
    run("arguments[0].value = '0'; arguments[0].dispatchEvent(new Event('input'))", slider)
    wait_for(lambda: pr.get_attribute("data-step") == "0")
    wait_for(lambda: run("return arguments[0].data[0].y", pr) != last)
    precision = run("return arguments[0].data[0].y", pr)
    recall = run("return arguments[0].data[0].x", pr)
    assert len(precision) == len(recall) == 11 and recall[0] == 1.0
    assert all(0.0 <= p <= 1.0 for p in precision if p is not None)
    # Embedding: PCA of the stored matrix; its first axis splits the two clusters.
    points = _drawn(driver, "embedding")
    groups = run("return arguments[0].data.map(t => [t.name, t.x])", points)
    assert sorted(name for name, _ in groups) == ["far", "near"]
    (_, near), (_, far) = sorted(groups)[::-1]
    assert len(near) == len(far) == 20
    assert max(near) < min(far) or max(far) < min(near)
    # Audio: a player whose clip the browser decodes (one second at 8 kHz).
    audio = driver.find_element(By.CSS_SELECTOR, ".tag-view[data-kind='audio'] audio")  # type: ignore[attr-defined]
    script = "return arguments[0].readyState >= 1 && arguments[0].duration"
    duration = wait_for(lambda: run(script, audio), 15)
    assert abs(duration - 1.0) < 0.01


@pytest.mark.slow
def test_diff_page_with_only_differences_toggle(server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    a, b, _ = _trains(server)
    with open_browser() as driver:
        driver.get(server + f"#/diff/{a['id']}/{b['id']}")
        wait_ready(driver, "diff")

        def arg_rows() -> list[str]:
            cells = driver.find_elements(By.CSS_SELECTOR, "#diff-args tr td:first-child")
            return [c.text for c in cells]

        assert arg_rows() == ["lr"]
        tensors = driver.find_element(By.ID, "diff-tensors").text
        assert "max abs diff" in tensors and "0.7" in tensors  # |0.2 - 0.1| * 7
        metrics = driver.find_element(By.ID, "diff-metrics").text
        assert "loss" in metrics
        screenshot(driver, tmp_path, "ui-diff.png")
        driver.find_element(By.ID, "only-diff").click()
        wait_for(lambda: "epochs" in arg_rows())
        assert "data" in arg_rows()


def test_diff_and_why_api_match_the_cli(server: str, seeded: Path) -> None:
    import json

    a, b, _ = _trains(server)
    status, page = get_json(server + f"api/diff/{a['id']}/{b['id']}")
    assert status == 200
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "memostore_cli.main",
            "--store",
            str(seeded),
            "diff",
            a["id"],
            b["id"],
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(cli.stdout)
    for field in ("args", "code", "metrics"):
        assert page[field] == expected[field], field
    assert page["result"]["tensors"] == expected["result"]["tensors"]
    status, why = get_json(server + f"api/why/{a['id']}")
    assert status == 200 and why["verdict"] == "hit" and why["method"] == "source"


def test_lineage_graph_links_parents_to_children(server: str) -> None:
    status, graph = get_json(server + "api/lineage")
    assert status == 200
    functions = {n["id"]: n["function"].split(":")[-1] for n in graph["nodes"]}
    assert sorted(functions.values()) == ["prepare", "train", "train", "train"]
    assert len(graph["edges"]) == 3
    assert {functions[p] for p, _ in graph["edges"]} == {"prepare"}


@pytest.mark.slow
def test_lineage_page_is_clickable(server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(server + "#/lineage")
        wait_ready(driver, "lineage")
        nodes = driver.find_elements(By.CSS_SELECTOR, "#lineage g.node")
        assert len(nodes) == 4
        assert len(driver.find_elements(By.CSS_SELECTOR, "#lineage line")) == 3
        screenshot(driver, tmp_path, "ui-lineage.png")
        target = nodes[0].get_attribute("data-id")
        nodes[0].click()
        wait_for(lambda: target[:10] in driver.find_element(By.TAG_NAME, "h1").text)
        wait_ready(driver, "eval")
        assert target[:10] in driver.find_element(By.TAG_NAME, "h1").text


@pytest.mark.slow
def test_a_live_run_grows_while_another_process_logs(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store = tmp_path / "store"
    stop = tmp_path / "stop"
    script = write_script(tmp_path, "live.py", LIVE)
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    writer = subprocess.Popen([sys.executable, str(script), str(stop)], env=env, cwd=tmp_path)
    try:
        wait_for(lambda: (store / "journal").is_dir() and any((store / "journal").iterdir()), 60)
        with ui_server(store) as url, open_browser() as driver:
            rows = wait_for(lambda: get_json(url + "api/runs")[1]["rows"], 30)
            assert rows[0]["status"] == "running"
            run_id = rows[0]["id"]
            # Only new points come back for a series held whole.
            first = get_json(url + f"api/chart?tag=loss&ids={run_id}")[1]["series"][0]
            time.sleep(0.5)
            more = get_json(
                url + f"api/chart?tag=loss&ids={run_id}&after={run_id}:{first['count']}"
            )
            series = more[1]["series"][0]
            assert series["append"] and series["count"] > first["count"]
            assert series["x"][0] == first["count"]
            assert len(series["x"]) == series["count"] - first["count"]

            driver.get(url + "?refresh=1000#/")
            wait_ready(driver, "runs")
            chart = driver.find_element(By.CSS_SELECTOR, ".chart[data-tag='loss']")

            def drawn() -> int:
                return int(driver.execute_script("return arguments[0].data[0].x.length", chart))

            def row_count() -> str:
                return driver.execute_script(
                    "return String((ms.table.byId.get(arguments[0]).metrics.loss || {}).count)",
                    run_id,
                )

            before, counted = drawn(), row_count()
            started = time.monotonic()
            wait_for(lambda: drawn() > before, timeout=10)
            grew_after = time.monotonic() - started
            wait_for(lambda: row_count() != counted, timeout=10)
            assert grew_after < 4.0  # refresh every 1 s, a point every 0.1 s
            status = driver.find_element(
                By.CSS_SELECTOR, f"#runs tr[data-id='{run_id}'] .status-running"
            )
            assert status.text == "running"
            screenshot(driver, tmp_path, "ui-live.png")
            stop.write_text("")
            writer.wait(timeout=60)

            # The run ended: the table lists its record instead, the chart keeps its points.
            # (The running row may go a refresh before the record's row arrives.)
            def ended() -> bool:
                rows = driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
                running = driver.find_elements(By.CSS_SELECTOR, "#runs .status-running")
                return not running and len(rows) == 1 and "ok" in rows[0].text

            wait_for(ended, 20)
    finally:
        stop.write_text("")
        writer.wait(timeout=60)
