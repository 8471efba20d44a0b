"""Whom the dashboard answers: its own pages, in a browser that was given its token.

A server on 127.0.0.1 is reachable by every web page the user visits: a
cross-site ``GET`` (an ``<img src>``, a ``fetch`` in ``no-cors`` mode) carries
the dashboard's own ``Host`` header, so the check against DNS rebinding
passes it, and the request does its work even when the page cannot read the
answer. So, as Jupyter does, each server makes a random token
(:func:`new_token`) and prints it in its URL (``/?token=...``):

- opening that URL sets a cookie holding the token (``HttpOnly``,
  ``SameSite=Strict``: a browser sends it only with requests the dashboard's
  own pages make) and redirects to the same URL without the token;
- every request needs the token, from that cookie, an ``X-Memostore-Token``
  header or a ``token`` query parameter (``curl``); none: 403;
- a request a browser marks as coming from another site or origin
  (``Sec-Fetch-Site: cross-site`` or ``same-site``, or an ``Origin`` that is
  not the dashboard's) gets 403 even with the token.

The cookie's name is derived from the token, so two dashboards on one host
(cookies do not tell ports apart) never overwrite each other's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = "x-memostore-token"
PARAMETER = "token"
_FOREIGN = ("cross-site", "same-site")  # Sec-Fetch-Site values of another origin's request


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def cookie_name(token: str) -> str:
    """The cookie that holds *token* in a browser (named per server)."""
    return "memostore-ui-" + hashlib.sha256(token.encode()).hexdigest()[:12]


class TokenGuard:
    """ASGI middleware: answers a request only with the token, and never from another site."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()
        self._cookie = cookie_name(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        foreign = self._foreign(headers)
        if foreign:
            await _refuse(send, foreign)
            return
        given = [v for k, v in query if k == PARAMETER]
        if not (self._matches(given[:1]) or self._matches(self._carried(headers))):
            await _refuse(
                send,
                "this dashboard answers only with its token: open the URL `memostore ui` "
                "printed (http://HOST:PORT/?token=...)",
            )
            return
        if given and scope["path"] == "/" and self._matches(given[:1]):
            # The page opened from the printed URL: keep the token in a cookie only the
            # dashboard's own pages send, and take it out of the address bar and history.
            rest = urlencode([(k, v) for k, v in query if k != PARAMETER])
            cookie = f"{self._cookie}={given[0]}; Path=/; HttpOnly; SameSite=Strict"
            await _respond(
                send,
                303,
                b"",
                [(b"location", ("/" + (f"?{rest}" if rest else "")).encode()), _header(cookie)],
            )
            return
        await self.app(scope, receive, send)

    def _matches(self, candidates: list[str]) -> bool:
        return any(hmac.compare_digest(c.encode(), self._token) for c in candidates)

    def _carried(self, headers: dict[str, str]) -> list[str]:
        out = [headers[HEADER]] if HEADER in headers else []
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self._cookie:
                out.append(value)
        return out

    @staticmethod
    def _foreign(headers: dict[str, str]) -> str:
        site = headers.get("sec-fetch-site", "")
        if site in _FOREIGN:
            return f"a request from another site ({site}) is refused"
        origin = headers.get("origin")
        if origin is not None and origin != f"http://{headers.get('host', '')}":
            return "a request from another origin is refused"
        return ""


def _header(text: str) -> tuple[bytes, bytes]:
    return (b"set-cookie", text.encode("latin-1"))


async def _refuse(send: Send, reason: str) -> None:
    await _respond(send, 403, f"403 Forbidden: {reason}\n".encode(), [])


async def _respond(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["HEADER", "PARAMETER", "TokenGuard", "cookie_name", "new_token"]
