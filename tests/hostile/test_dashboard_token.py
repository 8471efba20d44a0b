"""The dashboard answers only its own pages: its token, and never a request from another site.

Any web page the victim visits can send a request to ``127.0.0.1``; a
cross-site ``GET`` carries the dashboard's own ``Host`` header. A real
``memostore ui`` is asked, over real HTTP, without the token, with it, and
with it from another site or origin.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memostore.ui.guard import cookie_name

from .labkit import Lab, lab

__all__ = ["lab"]  # the fixture, imported

pytest.importorskip("uvicorn")


@contextmanager
def _dashboard(lab: Lab) -> Iterator[tuple[str, int, str, int]]:
    """``memostore ui --port 0`` on the victim's store: (host, port, token, pid)."""
    command = ["memostore_cli.main", "--store", str(lab.victim_store), "ui", "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = urllib.parse.urlsplit(proc.stdout.readline().strip())
        assert printed.scheme == "http" and printed.path == "/", printed
        (token,) = urllib.parse.parse_qs(printed.query)["token"]
        assert len(token) >= 32
        assert printed.hostname is not None and printed.port is not None
        yield printed.hostname, printed.port, token, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _get(where: tuple[str, int, str, int], path: str, **headers: str) -> http.client.HTTPResponse:
    host, port = where[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", path, headers={k.replace("_", "-"): v for k, v in headers.items()})
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def test_requests_need_the_token_and_never_come_from_another_site(lab: Lab) -> None:
    lab.run(lab.victim_store)
    with _dashboard(lab) as where:
        token = where[2]
        own = {"X_Memostore_Token": token}
        for path in ("/", "/api/runs", "/api/live", "/static/app.js", "/api/runs?token=wrong"):
            assert _get(where, path).status == 403, path
        assert _get(where, "/api/runs", X_Memostore_Token="not-it").status == 403
        assert _get(where, "/api/runs", **own).status == 200
        assert _get(where, f"/api/runs?token={token}").status == 200
        # What a page of another site can make a browser send, token or not.
        for foreign in (
            {"Sec_Fetch_Site": "cross-site"},
            {"Sec_Fetch_Site": "same-site"},  # another port of this host is another origin
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
        ):
            assert _get(where, "/api/runs", **own, **foreign).status == 403, foreign
            assert _get(where, f"/?token={token}", **foreign).status == 403, foreign
        # The dashboard's own page and requests are answered.
        assert _get(where, "/api/runs", **own, Sec_Fetch_Site="same-origin").status == 200
        origin = f"http://{where[0]}:{where[1]}"
        assert _get(where, "/api/runs", **own, Origin=origin).status == 200


def test_the_printed_url_becomes_a_strict_cookie_and_leaves_the_address(lab: Lab) -> None:
    lab.run(lab.victim_store)
    with _dashboard(lab) as where:
        token = where[2]
        opened = _get(where, f"/?token={token}&select=2", Sec_Fetch_Site="none")
        assert opened.status == 303
        assert opened.getheader("Location") == "/?select=2"  # the token is out of the address
        cookie = opened.getheader("Set-Cookie") or ""
        name_value = cookie.split(";")[0]
        assert name_value == f"{cookie_name(token)}={token}"
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        # The page's own requests carry the cookie.
        assert _get(where, "/?select=2", Cookie=name_value).status == 200
        assert _get(where, "/api/runs", Cookie=name_value).status == 200
        assert _get(where, "/api/runs", Cookie=f"{cookie_name(token)}=guess").status == 403
        # A wrong token in the URL sets nothing.
        assert _get(where, "/?token=guess").status == 403


def test_the_dashboard_reads_no_file_a_pulled_record_names(lab: Lab) -> None:
    from .remotekit import sparse
    from .test_record_boundary import HUGE, _named_files, _published

    huge = lab.outside / "huge.py"
    sparse(huge, HUGE)
    forged = _published(lab, str(lab.remote), _named_files(huge))
    with _dashboard(lab) as where:
        answer = _get(where, f"/api/why/{forged}", X_Memostore_Token=where[2])
        assert answer.status == 200
        reasons = json.loads(answer.body)["reasons"]  # type: ignore[attr-defined]
        assert any("pulled" in reason for reason in reasons), reasons
        with open(f"/proc/{where[3]}/status") as f:
            peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        assert peak < 350 << 10, f"the dashboard held {peak >> 10} MB"
