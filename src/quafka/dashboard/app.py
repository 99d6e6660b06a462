"""The dashboard's ASGI application (Starlette): routes, the security middleware, templates.

Routes (ids travel in query parameters: they may hold any character):
``/``, ``/topic?name=``, ``/share-group?group=[&topic=&partition=[&offset=]]``,
``/consumer-group?group=``, ``/failures[?group=]``, ``/workers``, ``/events?page=<page>&<its params>``
(server-sent events: fragments of that page), ``/actions/<name>`` (GET: confirmation with the dry
run; POST: execute, then 303 to the page), ``/static/...``.

Security on every response: a strict Content-Security-Policy (no inline script or style: the
pages load /static/app.js and /static/app.css only), nosniff, no referrer to other sites, no framing; pages are
not cached. Requests whose Host header is not the dashboard's own (bound address, loopback names,
configured names) are refused (400) by TrustedHostMiddleware: DNS rebinding. Templates escape
everything (autoescape is always on, whatever the template's name; undefined names raise).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import actions as acts
from . import sse
from .csrf import COOKIE, FIELD, Csrf
from .live import LiveHub
from .pages import PAGES, BadRequest, Page, Snapshots, live_key, load, parse_params, query_string
from .settings import DashboardSettings
from .source import Source, is_unavailable
from .views import History

__all__ = ["CSP", "create_app", "template_environment"]

log = logging.getLogger("quafka.dashboard")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_FORM_BYTES = 64 * 1024
ENABLE_HINT = ("Actions are off: this dashboard is read-only. Turn them on with the broker config "
               "quafka.dashboard.actions.enable=true, or `quafka dashboard --enable-actions`.")


def _number(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _size(value: Any) -> str:
    if value is None:
        return "—"
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(value)


def template_environment() -> jinja2.Environment:
    """Our own Environment: autoescape for every template (Starlette's default escapes only names
    ending .html/.htm/.xml), undefined names raise instead of printing nothing."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("quafka.dashboard", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["num"] = _number
    env.filters["size"] = _size
    env.tests["unavailable"] = is_unavailable
    return env


class _SecurityHeaders:
    """Pure ASGI middleware (BaseHTTPMiddleware would buffer the event streams)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope.get("path", "").startswith("/static/")

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            # same-origin, not no-referrer: under no-referrer a browser sends
                            # "Origin: null" with the confirmation form's POST, which the CSRF
                            # origin check must refuse (tests/dashboard/test_browser_actions.py)
                            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
                            (b"cross-origin-opener-policy", b"same-origin")]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def allowed_hosts(settings: DashboardSettings) -> list[str]:
    hosts = {"127.0.0.1", "localhost", "[::1]", "::1", *settings.allowed_hosts}
    host = settings.host
    if host not in ("0.0.0.0", "::"):
        hosts.add(f"[{host}]" if ":" in host else host)
    return sorted(hosts)


class Dashboard:
    """The application's state: settings, the Source, the live hub, history, CSRF, templates."""

    def __init__(self, settings: DashboardSettings, source: Source, shutdown: asyncio.Event) -> None:
        self.settings = settings
        self.source = source
        self.shutdown = shutdown
        self.hub = LiveHub(shutdown)
        self.history = History(settings.history_points)
        self.snapshots = Snapshots()
        self.csrf = Csrf()
        self.env = template_environment()

    def common(self, request: Request, page: str, title: str) -> dict[str, Any]:
        return {"page": page, "title": title, "actions": self.settings.actions_enabled,
                "mode": self.settings.mode, "beyond_loopback": self.settings.beyond_loopback,
                "events_url": "", "live": (), "path": request.url.path}

    def render(self, template: str, http_status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(template).render(**context), status_code=http_status)

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        title = {400: "Bad request", 403: "Refused", 404: "Not found"}.get(status, "Error")
        return self.render("error.html", status, **self.common(request, "error", title), status=status,
                           message=message, enable_hint=ENABLE_HINT if status == 403 and not
                           self.settings.actions_enabled else "")

    # ------------------------------------------------------------------ pages and live updates

    def cadence_s(self, page: Page) -> float:
        return self.settings.group_cadence_s if page.fast else self.settings.overview_cadence_s

    def page_handler(self, page: Page) -> Callable:
        async def handler(request: Request) -> Response:
            try:
                params = parse_params(page, request.query_params)
            except BadRequest as exc:
                return self.error(request, 400, str(exc))
            if params.get("offset") is None:  # "where is record O" is a lookup of its own: never reused
                ctx = await self.snapshots.get(live_key(page, params), self.cadence_s(page),
                                               lambda: load(page, self.source, self.history, params))
            else:
                ctx = await load(page, self.source, self.history, params)
            common = self.common(request, page.name, page.title)
            qs = query_string(page, params)
            common.update(events_url=f"/events?page={page.name}" + (f"&{qs}" if qs else ""), live=page.fragments)
            return self.render(page.template, **common, params=params, **ctx)

        return handler

    async def events(self, request: Request) -> Response:
        page = PAGES.get(request.query_params.get("page", ""))
        if page is None:
            return self.error(request, 400, "events need ?page= one of " + ", ".join(PAGES))
        try:
            params = parse_params(page, request.query_params)
        except BadRequest as exc:
            return self.error(request, 400, str(exc))
        common = self.common(request, page.name, page.title)
        s = self.settings

        key = live_key(page, params)

        async def produce() -> list[tuple[str, str]]:
            ctx = await self.snapshots.get(key, self.cadence_s(page),
                                           lambda: load(page, self.source, self.history, params, live=True))
            merged = {**common, "params": params, **ctx}
            return [(f, self.env.get_template(f"_{f}.html").render(**merged)) for f in page.fragments]

        queue = self.hub.subscribe(key, self.cadence_s(page), produce)

        async def body():
            try:
                async for chunk in sse.stream(queue, self.shutdown, s.keepalive_s, first=b"retry: 3000\n\n"):
                    yield chunk
            finally:
                self.hub.unsubscribe(key, queue)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    # ------------------------------------------------------------------ actions

    def _nonce(self, request: Request) -> tuple[str, bool]:
        nonce = request.cookies.get(COOKIE)
        return (nonce, False) if nonce else (self.csrf.new_nonce(), True)

    async def action(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not self.settings.actions_enabled:
            return self.error(request, 403, "This dashboard is read-only.")
        if request.method == "POST":
            return await self._execute(request, name)
        try:
            req = acts.parse_action(name, request.query_params)
        except acts.ActionError as exc:
            return self.error(request, 400, str(exc))
        planned = await acts.plan(self.source, req)
        nonce, new = self._nonce(request)
        response = self.render("action.html", **self.common(request, "action", req.title), req=req,
                               result=planned, token=self.csrf.token_for(nonce), field=FIELD,
                               back=acts.back_url(req), done=False)
        if new:
            response.headers.append("set-cookie", self.csrf.cookie_header(nonce))
        return response

    async def _execute(self, request: Request, name: str) -> Response:
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self.error(request, 400, "the form is too large")
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True).items()}
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        refusal = self.csrf.refusal(request.headers, request.cookies, form.get(FIELD), own)
        if refusal is not None:
            log.warning("dashboard: refused POST /actions/%s from %s: %s", name,
                        request.client.host if request.client else "?", refusal)
            return self.error(request, 403, f"Refused: {refusal}.")
        try:
            req = acts.parse_action(name, form)
        except acts.ActionError as exc:
            return self.error(request, 400, str(exc))
        result = await acts.execute(self.source, req)
        self.snapshots.invalidate()  # the page it returns to shows the broker after the action
        log.info("dashboard: %s: %s", req.title, result.get("text") or result.get("problem"))
        if result["problem"] is not None:
            nonce, _ = self._nonce(request)
            return self.render("action.html", 200, **self.common(request, "action", req.title), req=req,
                               result=result, token=self.csrf.token_for(nonce), field=FIELD,
                               back=acts.back_url(req), done=True)
        return RedirectResponse(acts.back_url(req), status_code=303)


def create_app(settings: DashboardSettings, source: Source | None = None,
               shutdown: asyncio.Event | None = None) -> Starlette:
    """The ASGI app. ``source``: the broker connection (a new Source over settings.client_config
    when None); ``shutdown``: set it to end every event stream (DashboardServer.close does)."""
    dash = Dashboard(settings, source or Source(settings), shutdown or asyncio.Event())
    static = resources.files("quafka.dashboard") / "static"
    routes = [Route("/" if name == "overview" else f"/{name}", dash.page_handler(page), name=name)
              for name, page in PAGES.items()]
    routes += [Route("/events", dash.events), Route("/actions/{name}", dash.action, methods=["GET", "POST"]),
               # browsers ask for /favicon.ico on their own; pages link the SVG
               Route("/favicon.ico", lambda _req: RedirectResponse("/static/favicon.svg", status_code=301)),
               Mount("/static", app=StaticFiles(directory=str(static)), name="static")]
    app = Starlette(routes=routes, middleware=[
        Middleware(_SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(settings))])
    app.state.dashboard = dash
    return app
