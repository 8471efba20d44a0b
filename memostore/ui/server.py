"""Serving the dashboard: bind, print the URL, then load the application and serve."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from .guard import PARAMETER, new_token

if TYPE_CHECKING:
    from pathlib import Path

    from ..odb.store import Store


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on *host*:*port* (``port=0``: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket, host: str, token: str) -> str:
    """The URL a browser opens for a socket bound by :func:`bind`, with the server's token."""
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?{PARAMETER}={token}"


def serve(store: Store | Path, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the dashboard until interrupted, printing its URL first on its own line.

    *store* is a store, or the path where one will be (see :func:`.app.create_app`).

    The socket listens before the URL is printed and before the web framework
    is imported: a client that reads the line can connect at once, and its
    first request is answered as soon as the application has loaded. The URL
    carries the server's token, made anew each time (:mod:`.guard`).
    """
    token = new_token()
    sock = bind(host, port)
    try:
        print(url_of(sock, host, token), flush=True)
        import uvicorn

        from .app import create_app

        config = uvicorn.Config(
            create_app(store, host, token), log_level="warning", access_log=False
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
