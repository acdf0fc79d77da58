"""What every dashboard route shares: the per-app state, the HTML route class that turns errors into
pages, and rendering with the session's values (tenant, CSRF token, navigation)."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobengine.dashboard.render import Renderer
from jobengine.dashboard.session import DashboardError, LoginRequired, Session, current
from jobengine.dashboard.stats import Recorder
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
    ("/graphs", "Graphs"),
    ("/failures", "Failures"),
    ("/dead", "Dead letter"),
    ("/packs", "Packs"),
)


@dataclass
class DashboardState:
    renderer: Renderer
    recorder: Recorder
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
    with its status and the field at fault; a bug → a 500 page, logged (HTML, not problem+json: a person
    reads it)."""

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
            except (HTTPException, RequestValidationError):
                raise  # the app's handlers answer them (html_errors for the dashboard's paths)
            except Exception as exc:
                log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
                return _error_page(request, 500, "the dashboard failed to show this page", None)

        return handler


#: Paths the HTTP API answers (problem+json errors); every other path is the dashboard's.
API_PATHS = ("/api/", "/openapi.json", "/docs", "/healthz", "/readyz", "/metrics")

ErrorHandler = Callable[[Request, Any], Response | Awaitable[Response]]


def is_api_path(path: str) -> bool:
    return path == "/api" or path.startswith(API_PATHS)


def html_errors(api_handler: ErrorHandler) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler of HTTP errors raised outside a route (no such path, a method the path does not
    take): an error page for dashboard paths, ``api_handler``'s answer for the API's."""

    async def handler(request: Request, exc: Exception) -> Response:
        if is_api_path(request.url.path) or not isinstance(exc, HTTPException):
            answer = api_handler(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        if exc.status_code == 404:
            message = f"there is no page at {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.url.path} does not take {request.method}"
        else:
            message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        session = None
        with contextlib.suppress(Exception):  # a page without the menu beats no page
            session = await current(request)
        return _error_page(request, exc.status_code, message, None, session, dict(exc.headers or {}))

    return handler


def _error_page(
    request: Request, status: int, message: str, field: str | None, session: Session | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:  # fmt: skip
    values = {"status": status, "message": message, "field": field}
    response = render(request, "error.html", session, values, status)
    response.headers.update(headers or {})
    return response
