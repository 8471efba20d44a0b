"""`memostore ui` following a store's life: before it exists, as runs start, end and die.

A real server over a store directory that does not exist when it starts;
real scripts log into it; nothing else touches the store (no CLI command
recovers a dead run): what the dashboard lists comes from the server alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script

pytest.importorskip("starlette")
from ui_support import get_json, ui_server, wait_for

FIRST = """
    from memostore import SummaryWriter

    with SummaryWriter("runs/first") as writer:
        for step in range(10):
            writer.add_scalar("loss", 1 / (step + 1), step)
"""

FOREVER = """
    import sys
    import time
    from memostore import SummaryWriter

    writer = SummaryWriter("runs/forever")
    step = 0
    while True:
        writer.add_scalar("loss", 1 / (step + 1), step)
        step += 1
        if step == 50:
            print("logging", flush=True)
        time.sleep(0.005)
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("life")
    store = root / "store"
    with ui_server(store) as url:
        yield {"root": root, "store": store, "url": url}


def test_a_missing_store_is_served_empty_then_picked_up(served: dict[str, Any]) -> None:
    url, store = served["url"], served["store"]
    status, listing = get_json(url + "api/runs")
    assert status == 200 and listing["rows"] == []
    empty = listing["empty"]
    assert empty["exists"] is False and empty["store"] == str(store)
    assert "SummaryWriter" in empty["example"] and empty["env"] == f"MEMOSTORE_DIR={store}"
    assert "first" in empty["message"]
    with urllib.request.urlopen(url, timeout=30) as page:
        text = page.read().decode()
    # The page says where the store will be and how to log into it, and waits for it.
    assert "No runs yet" in text and str(store) in text and "SummaryWriter" in text
    assert "/api/live" in text and "/static/app.js" not in text
    _, live = get_json(url + "api/live")
    before = live["version"]

    script = write_script(served["root"], "first.py", FIRST)
    run_script(script, env={"MEMOSTORE_DIR": str(store)})
    # The page polls /api/live: a new version says the listing changed.
    _, live = get_json(url + "api/live")
    assert live["version"] != before
    _, listing = get_json(url + "api/runs")
    assert listing["empty"] is None and listing["version"] == live["version"]
    with urllib.request.urlopen(url, timeout=30) as page:
        assert "/static/app.js" in page.read().decode()  # the dashboard now
    (row,) = listing["rows"]
    assert row["name"] == "first" and row["run_name"] == "runs/first" and row["status"] == "ok"
    query = urllib.parse.urlencode({"ids": row["id"], "tag": "loss"})
    _, chart = get_json(url + "api/chart?" + query)
    assert chart["series"][0]["name"] == "first" and chart["series"][0]["count"] == 10


def test_a_killed_run_shows_as_interrupted_within_10_s(served: dict[str, Any]) -> None:
    url, store = served["url"], served["store"]
    script = write_script(served["root"], "forever.py", FOREVER)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=served["root"],
        env={**os.environ, "MEMOSTORE_DIR": str(store)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "logging"

        def live_row() -> dict[str, Any] | None:
            rows = get_json(url + "api/live")[1]["rows"]
            return next((r for r in rows if r["function"] == "run:forever.py"), None)

        # Named as TensorBoard names the run once its writer's first points are flushed.
        row = wait_for(lambda: (r := live_row()) is not None and r["name"] == "forever" and r)
        assert row["status"] == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        dead = wait_for(
            lambda: (r := live_row()) is not None and r["status"] == "interrupted" and r,
            timeout=10,
            every=0.2,
        )
        assert time.monotonic() - killed < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert dead["id"] == row["id"] and dead["metrics"]["loss"]["count"] >= 50
    rows = {r["id"]: r for r in get_json(url + "api/runs")[1]["rows"]}
    assert rows[row["id"]]["status"] == "interrupted"
    # Its points stay readable, and nothing was recovered: the journal is still there.
    query = urllib.parse.urlencode({"ids": row["id"], "tag": "loss"})
    assert get_json(url + "api/chart?" + query)[1]["series"][0]["count"] >= 50
    assert list((Path(store) / "journal").glob(f"{row['id']}*"))
