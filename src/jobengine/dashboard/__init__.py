"""The web dashboard: server-rendered pages (Jinja2) made live with htmx and Server-Sent Events, served by
the same app as the HTTP API (``jobengine serve`` / ``jobengine up``) at ``/``.

No JavaScript build step: htmx, its SSE extension and uPlot (charts) are vendored minified files in
``static/`` (versions and licences in ``static/VENDORED.txt``), plus one small hand-written
``dashboard.js``. Like ``http/routes``, the pages call only the engine facade, scoped to the tenant of the
API key the user logged in with (``session.py``). Usage::

    app = create_app(engine, settings)      # http/app.py installs the dashboard
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles

from jobengine.dashboard import stream, views_graphs, views_jobs, views_ops, views_packs, views_runs
from jobengine.dashboard.base import DashboardState, html_errors
from jobengine.dashboard.render import Renderer
from jobengine.dashboard.stats import Recorder
from jobengine.http.context import ApiContext

__all__ = ["install"]

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI, ctx: ApiContext) -> None:
    """Serve the dashboard from ``app`` (pages at ``/``, files at ``/static``)."""
    refresh = ctx.settings.dashboard_refresh_seconds
    app.state.dashboard = DashboardState(Renderer(), Recorder(ctx.engine), refresh)
    app.mount("/static", StaticFiles(directory=STATIC), name="dashboard-static")
    # views_runs first: its /runs/new pages would otherwise match views_ops' /runs/{run_id} routes.
    routers = (views_runs.router, views_jobs.router, views_ops.router, views_graphs.router, views_packs.router)
    for router in (*routers, stream.router):
        app.include_router(router)
    # An unknown page or a wrong method outside the API answers a page with the layout; the API (and its
    # OpenAPI document and docs) keep the problem+json handler installed before.
    api_handler = app.exception_handlers[HTTPException]
    app.add_exception_handler(HTTPException, html_errors(api_handler))
