"""A real S3-API server (``moto_server``) on 127.0.0.1 for tests and benchmarks.

Usage::

    with MotoServer() as endpoint:      # "http://127.0.0.1:PORT"
        ...

The server is a subprocess of this process; ``stop()`` ends exactly that
process (by its pid), never anything else.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    # Keep a developer's own ~/.aws out of the tests.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def moto_available() -> bool:
    """True if moto's server and boto3 can be imported."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoServer:
    """Starts ``python -m moto.server`` on a free loopback port."""

    def __init__(self, startup_timeout: float = 30.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self.endpoint = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def start(self) -> str:
        """Start the server and wait until it answers; returns its endpoint URL."""
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        fd, log = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
        self._log = Path(log)
        env = {**os.environ, **DUMMY_AWS_ENV}
        with os.fdopen(fd, "wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return self.endpoint
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        log_text = self._log.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"moto_server did not start on {self.endpoint}:\n{log_text}")

    def reset(self) -> None:
        """Drop every bucket and object (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def stop(self) -> None:
        """Terminate the server process this object started."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
