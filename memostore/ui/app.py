"""The dashboard's web application: routes, static files and the server.

Every route is a GET that reads; none writes to the store. Every request
needs the server's token and comes from its own pages (:mod:`.guard`).
Request parameters never become file paths: ids are checked to be hex
digests and passed to the store's API, tags are looked up in logs manifests,
and the static files are a fixed table of names. Sizes a request asks for
(buckets, rows, ids, depth) are clamped: no request does work in proportion
to a number its sender chose.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..errors import MemostoreError, install_hint
from .charts import Charts
from .empty import empty_page
from .guard import TokenGuard
from .queries import FIRST_PAGE, BadRequest, Catalog, check_id

if TYPE_CHECKING:
    from ..odb.store import Store

STATIC = Path(__file__).resolve().parent / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
# Runs one request may name (the page asks in batches: a URL holds about 150 ids).
MAX_RUNS = 500


def _plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the plotly package is not installed: {install_hint('ui')}")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


def static_files() -> dict[str, Path]:
    """The only files the server sends: name -> path."""
    files = {p.name: p for p in STATIC.iterdir() if p.suffix in _TYPES}
    files["plotly.min.js"] = _plotly_js()
    return files


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class _JSON(JSONResponse):
    """JSON with NaN and infinities as null (browsers reject them otherwise)."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, allow_nan=False, separators=(",", ":"), default=str)
        except ValueError:
            text = json.dumps(_finite(content), separators=(",", ":"), default=str)
        return text.encode("utf-8")


def _answer(handler: Callable[[Request], Any]) -> Callable[[Request], Response]:
    """A route from a function returning data: JSON, or the BadRequest as an error."""

    def endpoint(request: Request) -> Response:
        try:
            result = handler(request)
        except BadRequest as exc:
            return _JSON({"error": str(exc)}, status_code=exc.status)
        return result if isinstance(result, Response) else _JSON(result)

    return endpoint


def _window(params: Any) -> tuple[float, float] | None:
    lo, hi = params.get("from"), params.get("to")
    if lo in (None, "") or hi in (None, ""):
        return None
    try:
        x0, x1 = float(lo), float(hi)
    except ValueError as exc:
        raise BadRequest("from and to must be numbers") from exc
    if not (math.isfinite(x0) and math.isfinite(x1)) or x1 < x0:
        raise BadRequest("from and to must be finite, from <= to")
    return x0, x1


def _after(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part:
            continue
        run, _, count = part.partition(":")
        if not count.isdigit():
            raise BadRequest("after is ID:COUNT,...")
        out[check_id(run)] = int(count)
    return out


def allowed_hosts(host: str) -> list[str]:
    """The Host headers the server answers: a page of another site that resolves its own
    name to 127.0.0.1 (DNS rebinding) must not read the store through the browser."""
    if host in ("0.0.0.0", "::", ""):
        return ["*"]
    local = ["127.0.0.1", "localhost", "::1", "[::1]"]
    return sorted({host, f"[{host}]" if ":" in host else host, *local})


def create_app(store: Store | Path, host: str, token: str) -> Starlette:
    """The dashboard over *store*, answering requests addressed to *host* (or localhost)
    that carry *token* (see :mod:`.guard`).

    *store* may be the path of a store not made yet: the dashboard then shows
    how to log a first run there, and the store once it appears.
    """
    from . import across, pages

    catalog = Catalog(store)
    charts = Charts(catalog)
    files = static_files()

    def warm() -> None:
        # The table's first page is read before the first request asks for it, then
        # the series of its runs, before a chart asks for them.
        catalog.warm()
        with contextlib.suppress(BadRequest, MemostoreError, OSError):
            charts.warm(catalog.first_page(FIRST_PAGE)["rows"])

    threading.Thread(target=warm, name="memostore-ui-warm", daemon=True).start()

    def index(request: Request) -> Response:
        if catalog.holds_nothing():
            empty = catalog.empty([])
            assert empty is not None
            return HTMLResponse(empty_page(empty), headers={"Cache-Control": "no-store"})
        return FileResponse(STATIC / "index.html", media_type="text/html")

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        path = files.get(name)
        if path is None:
            return Response("not found", status_code=404)
        return FileResponse(path, media_type=_TYPES.get(path.suffix, "application/octet-stream"))

    def ids_of(params: Any) -> list[str]:
        # Once each, and a bounded number: the work is per run named.
        ids = list(dict.fromkeys(check_id(i) for i in params.get("ids", "").split(",") if i))
        if len(ids) > MAX_RUNS:
            raise BadRequest(f"at most {MAX_RUNS} runs per request; ask in batches")
        return ids

    def runs(request: Request) -> Any:
        limit = request.query_params.get("limit")
        if limit is not None and (not limit.isdigit() or not 0 < int(limit) <= 10_000):
            raise BadRequest("limit is a number of rows, 1 to 10000")
        version = catalog.version()  # before reading: a change meanwhile is seen next poll
        listing = catalog.runs() if limit is None else catalog.first_page(int(limit))
        return {**listing, "version": version, "empty": catalog.empty(listing["rows"])}

    def live(request: Request) -> Any:
        version = catalog.version()
        rows = catalog.live_rows()
        return {"rows": rows, "version": version}

    def sessions(request: Request) -> Any:
        from .hparams import hparams_sessions

        return hparams_sessions(catalog, ids_of(request.query_params))

    def chart(request: Request) -> Any:
        params = request.query_params
        ids = ids_of(params)
        tag = params.get("tag")
        if not tag:
            raise BadRequest("tag is required")
        smoothing = params.get("smooth", "none")
        try:
            weight = float(params.get("weight", "0"))
            buckets = int(params.get("buckets", "800"))
        except ValueError as exc:
            raise BadRequest("weight and buckets must be numbers") from exc
        if smoothing not in ("none", "ema", "tw-ema") or not 0.0 <= weight < 1.0:
            raise BadRequest("smooth is none, ema or tw-ema; weight in [0, 1)")
        body = charts.chart_json(
            ids,
            tag,
            x_mode=params.get("x", "step"),
            smoothing=smoothing,
            weight=weight,
            window=_window(params),
            buckets=buckets,
            after=_after(params.get("after")),
        )
        return Response(body, media_type="application/json")

    def evaluation(request: Request) -> Any:
        return pages.evaluation_page(catalog, check_id(request.path_params["id"]))

    def events(request: Request) -> Any:
        params = request.query_params
        return pages.tag_events(catalog, check_id(params.get("id", "")), params.get("tag", ""))

    def media(request: Request) -> Response:
        params = request.query_params
        try:
            position = int(params.get("i", ""))
        except ValueError as exc:
            raise BadRequest("i must be a point's index") from exc
        data, media_type = pages.media_bytes(
            catalog, check_id(params.get("id", "")), params.get("tag", ""), position
        )
        headers = {"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"}
        return Response(data, media_type=media_type, headers=headers)

    def projection(request: Request) -> Any:
        params = request.query_params
        try:
            position = int(params.get("i", ""))
        except ValueError as exc:
            raise BadRequest("i must be a point's index") from exc
        identifier = check_id(params.get("id", ""))
        return pages.embedding_projection(catalog, identifier, params.get("tag", ""), position)

    def across_tag(request: Request) -> Any:
        params = request.query_params
        if not params.get("tag"):
            raise BadRequest("tag is required")
        return across.tag_across(catalog, ids_of(params), params["tag"])

    def graph(request: Request) -> Any:
        params = request.query_params
        position = params.get("i")
        if position is not None and not position.isdigit():
            raise BadRequest("i must be a point's index")
        identifier = check_id(params.get("id", ""))
        return across.graph_tree(
            catalog, identifier, params.get("tag", ""), None if position is None else int(position)
        )

    def hparams(request: Request) -> Any:
        return across.hparams_across(catalog, ids_of(request.query_params))

    def diff(request: Request) -> Any:
        a, b = check_id(request.path_params["a"]), check_id(request.path_params["b"])
        return pages.diff_page(catalog, a, b)

    def why(request: Request) -> Any:
        return pages.why_miss_page(catalog, check_id(request.path_params["id"]))

    def lineage(request: Request) -> Any:
        from .lineage import lineage as graph

        params = request.query_params
        focus = params.get("focus") or None
        if focus is not None and not all(c in "0123456789abcdef" for c in focus):
            raise BadRequest("focus is an evaluation id or a prefix of one")
        depth = params.get("depth", "2")
        if not depth.isdigit():
            raise BadRequest("depth is a number of generations")
        return graph(catalog, focus, int(depth))

    routes = [
        Route("/", index),
        Route("/static/{name}", static),
        Route("/api/runs", _answer(runs)),
        Route("/api/live", _answer(live)),
        Route("/api/sessions", _answer(sessions)),
        Route("/api/chart", _answer(chart)),
        Route("/api/eval/{id}", _answer(evaluation)),
        Route("/api/events", _answer(events)),
        Route("/api/media", _answer(media)),
        Route("/api/projection", _answer(projection)),
        Route("/api/tag", _answer(across_tag)),
        Route("/api/graph", _answer(graph)),
        Route("/api/hparams", _answer(hparams)),
        Route("/api/diff/{a}/{b}", _answer(diff)),
        Route("/api/why/{id}", _answer(why)),
        Route("/api/lineage", _answer(lineage)),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(host)),
        Middleware(TokenGuard, token=token),
    ]
    return Starlette(routes=routes, middleware=middleware)
