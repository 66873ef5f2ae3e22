"""The web app: a page per view (one HTML shell; static/app.js draws the view from its JSON) and the JSON API
behind each (FastAPI: the OpenAPI document at /openapi.json, browsable at /docs). Read-only: GET only.

Every view's URL carries what it shows (app, env, date or from/to, page, filters), so it can be shared. With a
token, every request must carry it: `Authorization: Bearer TOKEN`, basic auth with the token as the password, or
the cookie a first visit with `?token=TOKEN` sets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hmac
import html
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources as package_files
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from logport.errors import LogportError
from logport.ui.lake import LakeReader
from logport.ui.live import LiveFeed
from logport.ui.timerange import TimeRange
from logport.ui.views import LIMIT, Stream, Views

STATIC = Path(str(package_files.files("logport.ui") / "static"))
ECHARTS = STATIC / "echarts.min.js"
COOKIE = "logport_ui_token"
KEEPALIVE = 15.0  # seconds between SSE comments, so proxies keep the stream open
PAGES = ("overview", "dashboard", "actions", "action", "requests", "request", "exceptions", "js_errors", "frontend",
         "notifications", "history", "logs", "live")


# the query parameters every view takes (module level: FastAPI resolves the annotations by name)
Date = Annotated[str | None, Query(description="a day, YYYY-MM-DD")]
From = Annotated[str | None, Query(alias="from", description="first day or minute, YYYY-MM-DD[THH:MM]")]
To = Annotated[str | None, Query(description="last day (included) or end minute (excluded)")]
Interval = Annotated[int | None, Query(ge=1, le=1440, description="minutes per point (default: by range)")]
App = Annotated[str, Query(alias="app", description="the app of an app-env (logjam's stream)")]


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


class FastJSON(JSONResponse):
    """JSON by orjson (NaN as null, datetimes as ISO text, map keys of any type as text)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def shell(view: str, title: str) -> str:
    """The HTML of every page: the view's name for app.js, the charts library and the app's script, all served
    from this package (nothing from the network)."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · logport</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/app.css"></head>
<body data-view="{view}"><header id="top"></header><main id="main"><p class="loading">loading…</p></main>
<script src="/static/echarts.min.js"></script><script src="/static/app.js"></script></body></html>"""


def token_of(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if auth.lower().startswith("basic "):
        try:
            return base64.b64decode(auth[6:]).decode().split(":", 1)[1]
        except (ValueError, IndexError, UnicodeDecodeError):
            return None
    return request.cookies.get(COOKIE)


def create_app(lake_dir: str | Path, servers: list[str] | None = None, token: str | None = None,
               live_token: str = "") -> FastAPI:
    if not ECHARTS.exists():
        raise LogportError(f"{ECHARTS} is missing: the charts library is copied there at build time "
                           "(`make setup`, or `npm ci` then `make ui-assets`)")
    lake = LakeReader(lake_dir)
    views = Views(lake)
    feed = LiveFeed(servers or [], token=live_token)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        feed.start()
        try:
            yield
        finally:
            await feed.stop()
            lake.close()

    app = FastAPI(title="logport ui", version="1", lifespan=lifespan, default_response_class=FastJSON,
                  description="The views of `logport ui` as JSON: every page draws what its call returns. Ranges: "
                              "`date=YYYY-MM-DD`, or `from`/`to` as YYYY-MM-DD or YYYY-MM-DDTHH:MM (the lake's "
                              "wall-clock minutes); without them, the lake's latest day.")
    app.state.views, app.state.feed = views, feed
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    if token:
        @app.middleware("http")
        async def require_token(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            given = request.query_params.get("token")
            if given is not None and hmac.compare_digest(given.encode(), token.encode()):
                query = "&".join(f"{k}={v}" for k, v in request.query_params.multi_items() if k != "token")
                response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), status_code=303)
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
                return response
            found = token_of(request)
            if found is None or not hmac.compare_digest(found.encode(), token.encode()):
                return FastJSON({"error": "a token is needed: Authorization: Bearer TOKEN, basic auth with the "
                                          "token as password, or open the page once with ?token=TOKEN"},
                                status_code=401, headers={"WWW-Authenticate": 'Basic realm="logport ui"'})
            return await call_next(request)

    @app.exception_handler(LogportError)
    async def bad_parameters(request: Request, exc: LogportError) -> Response:
        return FastJSON({"error": str(exc)}, status_code=400)

    def when(date: str | None, start: str | None, end: str | None) -> TimeRange:
        return TimeRange.parse(date, start, end, views.default_day())

    @app.get("/api/meta", summary="App-envs and dates in the lake")
    def api_meta() -> Any:
        return {**views.meta(), "live": bool(servers)}

    @app.get("/api/overview", summary="Every app-env: requests, apdex, error rate, p95 (logjam's leaders)")
    def api_overview(date: Date = None, start: From = None, to: To = None) -> Any:
        return views.overview(when(date, start, to))

    @app.get("/api/dashboard", summary="One app-env: series per interval, summary, top actions, event markers")
    def api_dashboard(app_: App, env: str, date: Date = None, start: From = None,
                      to: To = None, interval: Interval = None) -> Any:
        return views.dashboard(Stream(app_, env), when(date, start, to), interval)

    @app.get("/api/actions", summary="Actions or modules ranked by a function of a resource")
    def api_actions(app_: App, env: str, date: Date = None, start: From = None,
                    to: To = None, resource: str = "total_time", sort: str = "sum", group: str = "action",
                    module: str | None = None, order: str = "desc", limit: int = LIMIT) -> Any:
        return views.actions(Stream(app_, env), when(date, start, to), resource, sort, group, module, limit,
                             order != "asc")

    @app.get("/api/action", summary="One action, module or all_pages: resources, distribution, heatmap, codes")
    def api_action(app_: App, env: str, page: str, date: Date = None,
                   start: From = None, to: To = None, interval: Interval = None) -> Any:
        return views.action(Stream(app_, env), page, when(date, start, to), interval)

    @app.get("/api/requests", summary="Stored requests behind a count (slow, errors, a code, an exception)")
    def api_requests(app_: App, env: str, date: Date = None, start: From = None,
                     to: To = None, page: str | None = None, reason: str | None = None, code: str | None = None,
                     exception: str | None = None, severity: int | None = None, sort: str = "total_time",
                     limit: int = LIMIT, offset: int = 0) -> Any:
        return views.requests(Stream(app_, env), when(date, start, to), page, reason, code, exception, severity, sort,
                              limit, offset)

    @app.get("/api/request", summary="One stored request with its log lines and where its raw event is")
    def api_request(app_: App, env: str, date: str, id: str) -> Any:
        found = views.request(Stream(app_, env), date, id)
        address = feed.hub_ids.get(found["raw"]["hub"])
        if address:
            found["raw"]["command"] = found["raw"]["command"].replace("HUB_ADDRESS", address)
            found["raw"]["address"] = address
        return found

    @app.get("/api/exceptions", summary="Exceptions and soft exceptions: counts and timelines")
    def api_exceptions(app_: App, env: str, date: Date = None, start: From = None,
                       to: To = None, interval: Interval = None) -> Any:
        return views.exceptions(Stream(app_, env), when(date, start, to), interval)

    @app.get("/api/js_errors", summary="JavaScript errors: descriptions and the latest messages")
    def api_js_errors(app_: App, env: str, date: Date = None, start: From = None,
                      to: To = None) -> Any:
        return views.js_errors(Stream(app_, env), when(date, start, to))

    @app.get("/api/frontend", summary="Page and ajax timings, fapdex/papdex/xapdex, user agents")
    def api_frontend(app_: App, env: str, date: Date = None, start: From = None,
                     to: To = None, interval: Interval = None) -> Any:
        return views.frontend(Stream(app_, env), when(date, start, to), interval)

    @app.get("/api/notifications", summary="Agent events (deploys, restarts), newest first")
    def api_notifications(app_: Annotated[str | None, Query(alias="app")] = None, env: str | None = None,
                          date: Date = None, start: From = None, to: To = None) -> Any:
        stream = Stream(app_, env) if app_ and env else None
        return {"rows": views.notifications(stream, when(date, start, to))}

    @app.get("/api/history", summary="One row per day (default: the last 30 days of the lake)")
    def api_history(app_: App, env: str, start: From = None, to: To = None) -> Any:
        if not (start or to):
            last = views.default_day()
            if last:
                first = (dt.date.fromisoformat(last) - dt.timedelta(days=29)).isoformat()
                return views.history(Stream(app_, env), TimeRange.parse(None, first, last, last))
        return views.history(Stream(app_, env), when(None, start, to))

    @app.get("/api/logs", summary="Log volume by tag, host and level; message patterns, new and growing first")
    def api_logs(date: Date = None, start: From = None, to: To = None, tag: str | None = None,
                 host: str | None = None, level: str | None = None, interval: Interval = None) -> Any:
        return views.logs(when(date, start, to), tag, host, level, interval)

    @app.get("/api/live", summary="The latest requests and errors the hubs stored, and the hubs' state")
    def api_live() -> Any:
        return {"items": list(feed.latest), "hubs": feed.status}

    @app.get("/api/live/events", summary="Server-sent events: each new item as `data: JSON`")
    async def api_live_events(request: Request) -> StreamingResponse:
        async def stream() -> AsyncIterator[bytes]:
            items = feed.subscribe()
            yield b": following\n\n"
            try:
                pending = asyncio.ensure_future(anext(items))
                while not await request.is_disconnected():
                    done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE)
                    if not done:
                        yield b": keepalive\n\n"
                        continue
                    yield b"data: " + orjson.dumps(pending.result(), default=_default) + b"\n\n"
                    pending = asyncio.ensure_future(anext(items))
                pending.cancel()
            finally:
                await items.aclose()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    for view in PAGES:
        path = "/" if view == "overview" else f"/{view}"

        def page(view: str = view) -> HTMLResponse:
            return HTMLResponse(shell(view, view.replace("_", " ")))

        app.add_api_route(path, page, methods=["GET"], include_in_schema=False, response_class=HTMLResponse)
    return app
