"""The two servers the dashboard benchmark measures: ``memostore ui`` and TensorBoard.

Each is started as its user starts it, on a free loopback port, waited for
(the dashboard prints its URL; TensorBoard is polled until it serves every
run's last step), and stopped; :func:`settle` waits until a server has done
the reading it does when it starts.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# "host:port" -> the token of each dashboard this process started.
_TOKENS: dict[str, str] = {}


class _TokenHeader(urllib.request.BaseHandler):
    """Sends a dashboard's token with each request addressed to it (as its page does)."""

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        token = _TOKENS.get(request.host)
        if token is not None:
            request.add_unredirected_header("X-Memostore-Token", token)
        return request


urllib.request.install_opener(urllib.request.build_opener(_TokenHeader()))


def with_token(url: str) -> str:
    """*url* of a dashboard started here, with its token: what a browser opens."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.urlencode([("token", _TOKENS[parts.netloc])]) + (
        f"&{parts.query}" if parts.query else ""
    )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def fetch(url: str, timeout: float = 120) -> Any:
    """The decoded JSON of a GET."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of a process (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server (killed after 20 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_ui(store: Path) -> tuple[subprocess.Popen, str]:
    """``memostore ui --port 0`` over *store*: (process, the URL it prints first, without
    its token: requests of this process send it, :func:`with_token` adds it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    parts = urllib.parse.urlsplit(proc.stdout.readline().strip())
    _TOKENS[parts.netloc] = urllib.parse.parse_qs(parts.query)["token"][0]
    return proc, urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _family(pid: int) -> list[int]:
    """*pid* and its descendants (TensorBoard's data server is a child process)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            todo += [int(child) for child in task.read_text().split()]
    return found


def settle(pid: int, quiet_s: float = 1.0, timeout: float = 600) -> None:
    """Wait until a server is idle: the CPU time of its processes has not grown for
    *quiet_s* (it has read what it reads when it starts, or answered a page)."""

    def cpu_ticks() -> int:
        total = 0
        for member in _family(pid):
            try:
                fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            total += int(fields[11]) + int(fields[12])  # utime + stime
        return total

    last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        ticks = cpu_ticks()
        if ticks != last:
            last, since = ticks, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)


def tensorboard_command() -> str:
    """The ``tensorboard`` script of this Python's environment (or the one on PATH)."""
    beside = Path(sys.executable).parent / "tensorboard"
    return str(beside) if beside.exists() else shutil.which("tensorboard") or "tensorboard"


def post_form(url: str, fields: dict[str, Any]) -> bytes:
    """The body of a form POST."""
    data = urllib.parse.urlencode(fields, doseq=True).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=600) as response:
        return response.read()


@contextmanager
def tensorboard_server(
    logdir: Path, runs: int, points: int, python_loader: bool, reload_s: int = 1
) -> Iterator[dict[str, Any]]:
    """TensorBoard over *logdir*, once it serves every run's last step.

    Yields ``{"base", "names", "cold", "pid"}``: its URL, its run names, the seconds
    from its start to every run served, its process id. It reads the log directory
    again every *reload_s* seconds (its default is 5; 1 to see it loaded sooner).
    """
    port = free_port()
    started = time.perf_counter()
    loader = ("--load_fast", "false") if python_loader else ()
    proc = subprocess.Popen(
        [
            *(tensorboard_command(), "--logdir", str(logdir), "--host", "127.0.0.1"),
            *("--port", str(port), *loader, "--reload_interval", str(reload_s)),
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
                    body = post_form(
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
        yield {"base": base, "names": names, "cold": cold, "pid": proc.pid}
    finally:
        stop(proc)
