"""Running the dashboard for tests: a real `memostore ui` process and a real headless Chromium.

The server prints its URL with its token (``http://127.0.0.1:PORT/?token=T``);
:func:`ui_server` yields the URL without it and remembers the token, which
every ``urllib`` request of the tests sends as a header and every browser of
:func:`browser` holds as the cookie the dashboard's page would have set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Without these, Chromium on a machine with no network stalls on start-up fetches.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # WebGL (plotly's parallel coordinates) in software, as Chromium asks to be told.
    "--enable-unsafe-swiftshader",
    "--window-size=1400,1000",
)


# Documentation screenshots (docs/images/) bigger than this get a 256-colour palette.
DOC_IMAGE_BYTES = 60_000

# "host:port" -> the token of each dashboard running for this test process.
TOKENS: dict[str, str] = {}


def split_token(printed: str) -> tuple[str, str]:
    """(the URL without its token, the token) of the URL `memostore ui` prints."""
    parts = urllib.parse.urlsplit(printed)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), token


class _TokenHeader(urllib.request.BaseHandler):
    """Adds a running dashboard's token to a request addressed to it."""

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        token = TOKENS.get(request.host)
        if token is not None and not request.has_header("X-memostore-token"):
            request.add_unredirected_header("X-Memostore-Token", token)
        return request


urllib.request.install_opener(urllib.request.build_opener(_TokenHeader()))


@contextmanager
def ui_server(store: Path, *extra: str) -> Iterator[str]:
    """`memostore ui --port 0 --store STORE` as a process; yields the URL of its first line,
    without its token (requests of this process and its browsers carry the token)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memostore_cli.main",
            "--store",
            str(store),
            "ui",
            "--port",
            "0",
            *list(extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = proc.stdout.readline().strip()
        if not printed.startswith("http://"):
            proc.kill()
            raise AssertionError(f"no URL printed: {printed!r}; stderr: {proc.stderr.read()}")
        url, token = split_token(printed)
        netloc = urllib.parse.urlsplit(url).netloc
        TOKENS[netloc] = token
        try:
            yield url
        finally:
            del TOKENS[netloc]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get_json(url: str) -> tuple[int, Any]:
    """(status, decoded JSON body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode("utf-8", "replace")


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium driven by selenium through the system chromedriver."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup-env installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="ms-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    navigate = driver.get

    def get(url: str) -> None:
        # What opening the printed URL leaves in a browser: the dashboard's cookie.
        netloc = urllib.parse.urlsplit(url).netloc
        if netloc in TOKENS:
            from memostore.ui.guard import cookie_name

            token = TOKENS[netloc]
            cookie = {"name": cookie_name(token), "value": token, "url": f"http://{netloc}/"}
            driver.execute_cdp_cmd("Network.setCookie", {**cookie, "sameSite": "Strict"})
        navigate(url)

    driver.get = get
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(predicate: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll *predicate* until it returns something truthy; that value, or AssertionError."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (NoSuchElementException, StaleElementReferenceException):
            value = None  # the page was redrawn under us: look again
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")
        time.sleep(every)


def wait_ready(driver: Any, page: str, timeout: float = 30.0) -> None:
    """Wait until the page's view says it has drawn *page* (``runs``, ``eval``, ...)."""
    script = "return document.getElementById('view').dataset.ready"
    wait_for(lambda: driver.execute_script(script) == page, timeout)


def screenshot(
    driver: Any, tmp_path: Path, name: str, element: Any = None, rows: tuple[int, int] | None = None
) -> Path:
    """Save a PNG of the page (or one element, or the window's *rows* from top to bottom)
    under tmp_path; copied to $MEMOSTORE_UI_SCREENSHOTS as well when that is set (how
    docs/images/ is refreshed)."""
    path = tmp_path / name
    if element is not None:
        path.write_bytes(element.screenshot_as_png)
    else:
        driver.save_screenshot(str(path))
    target = os.environ.get("MEMOSTORE_UI_SCREENSHOTS")
    if target:
        from PIL import Image

        Path(target).mkdir(parents=True, exist_ok=True)
        kept = Path(target) / name
        with Image.open(path) as shot:
            image = shot.convert("RGB")
        if rows is not None:
            image = image.crop((0, max(0, rows[0]), image.width, min(image.height, rows[1])))
        # Kept exact when small enough: a palette maps a run's swatch to the nearest colour
        # of the logged images beside it. Else a 256-colour palette keeps the image small.
        image.save(kept, optimize=True)
        if kept.stat().st_size > DOC_IMAGE_BYTES:
            image.quantize(colors=256).save(kept, optimize=True)
    return path


def color_pixels(png: bytes, color: str, tolerance: int = 40) -> int:
    """How many pixels of a PNG are within *tolerance* of ``#rrggbb`` (per channel)."""
    import io

    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int32)
    rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int32)
    return int((np.abs(image - rgb).max(axis=2) <= tolerance).sum())
