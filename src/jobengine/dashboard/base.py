"""What every dashboard route shares: the per-app state, the HTML route class that turns errors into
pages, and rendering with the session's values (tenant, CSRF token, navigation)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobengine.dashboard.render import Renderer
from jobengine.dashboard.session import DashboardError, LoginRequired, Session
from jobengine.dashboard.stats import CountCache, Recorder
from jobengine.engine import Engine
from jobengine.errors import JobEngineError
from jobengine.http.context import context
from jobengine.http.problems import status_of

log = logging.getLogger("jobengine.dashboard")

NAV = (
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/queues", "Queues"),
    ("/workers", "Workers"),
    ("/schedules", "Schedules"),
    ("/runs", "Runs"),
    ("/failures", "Failures"),
    ("/dead", "Dead letter"),
    ("/packs", "Packs"),
)


@dataclass
class DashboardState:
    renderer: Renderer
    recorder: Recorder
    counts: CountCache
    #: Seconds between refreshes of the live overview.
    refresh: float


def state(request: Request) -> DashboardState:
    value = request.app.state.dashboard
    assert isinstance(value, DashboardState)
    return value


def engine(request: Request) -> Engine:
    return context(request).engine


def render(
    request: Request, template: str, session: Session | None, values: Mapping[str, Any], status: int = 200
) -> Response:
    common = {
        "session": session,
        "csrf": session.csrf if session else "",
        "tenant": session.tenant if session else None,
        "nav": NAV,
        "path": request.url.path,
        "notice": request.query_params.get("done"),
    }
    return state(request).renderer.page(template, {**common, **values}, status)


def see_other(path: str, done: str | None = None) -> RedirectResponse:
    """Post / redirect / get: back to a page, with a notice of what was done."""
    target = path + ("?" + urlencode({"done": done}) if done else "")
    return RedirectResponse(target, status_code=303)


class HtmlRoute(APIRoute):
    """A dashboard route: no session → the login page; a refused action or a jobengine error → an error page
    with its status and the field at fault (HTML, not problem+json: a person reads it)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except LoginRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
            except DashboardError as exc:
                return _error_page(request, exc.status, exc.message, exc.field)
            except JobEngineError as exc:
                status, field = status_of(exc)
                if status >= 500 and status != 503:
                    log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
                message = getattr(exc, "message", None) or str(exc)
                return _error_page(request, status, message, field)

        return handler


def _error_page(request: Request, status: int, message: str, field: str | None) -> Response:
    values = {"status": status, "message": message, "field": field}
    return render(request, "error.html", None, values, status)
