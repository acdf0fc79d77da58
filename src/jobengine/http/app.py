"""The FastAPI application: ``create_app(engine, settings)``. No module-level app and no global state:
each call builds an app around the given engine (tests build several, one per engine).

Usage::

    engine = Engine.from_settings(settings)
    app = create_app(engine, settings)
    async with engine:
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8080)).serve()

The app never starts or closes the engine (its owner does) and calls only the engine facade.
Middleware, outermost first: request metrics, body limit and media type (and text no backend can store),
Idempotency-Key, the 500 answer to an unexpected exception; then FastAPI's routing, auth dependencies and
the problem+json error handlers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from jobengine import dashboard
from jobengine.engine import Engine
from jobengine.http import docs, openapi, problems
from jobengine.http.auth import Authenticator
from jobengine.http.context import ApiContext
from jobengine.http.metrics import Metrics, RequestMetrics
from jobengine.http.middleware import BodyLimit, Idempotency, SingleValuedQuery, Unexpected
from jobengine.http.routes import (
    events,
    flow,
    graphs,
    health,
    jobs,
    packs,
    queues,
    runs,
    schedules,
    webhooks,
    worker,
    workers,
)
from jobengine.settings import Settings
from jobengine.version import __version__

DESCRIPTION = """The jobengine HTTP API: jobs, queues, dead-letter, events (also as SSE), and the worker protocol.

Authenticate with an API key: `Authorization: Bearer je_...` (create one with `jobengine keys create`).
Every request sees only the key's tenant. Errors are `application/problem+json` (RFC 9457). POST requests
may carry an `Idempotency-Key` header: the same key and body get the first answer again."""


def create_app(engine: Engine, settings: Settings | None = None) -> FastAPI:
    """A new app serving ``engine``; ``settings`` default to the engine's."""
    s = settings or engine.settings
    registry = engine.packs  # a blob store setting that cannot work fails here (ConfigError naming it), not later
    metrics = Metrics()
    ctx = ApiContext(engine, s, Authenticator(engine, s.api_key_cache_seconds), metrics)
    engine.bus.add_listener(metrics.on_event)
    engine.keys.on_revoked(ctx.auth.forget)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.health.add("packs", registry.check_blobs)  # where pack content lives (settings.blob_store_kind)
        try:
            yield
        finally:
            engine.health.remove("packs")
            engine.bus.remove_listener(metrics.on_event)

    app = FastAPI(
        title="jobengine",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url=None,  # openapi.install serves it
        docs_url=None,  # docs.install serves /docs from vendored files
        redoc_url=None,
    )
    app.state.jobengine = ctx
    problems.install(app)
    # A request walks the routers in this order until one has its route (FastAPI does not skip a router by its
    # prefix), so the ones called for every job and every worker's batch come first.
    routers = (
        jobs.router, worker.router, events.router, queues.router, queues.dead_router, schedules.router,
        runs.router, runs.signatures, health.router, packs.router, webhooks.router, webhooks.hooks, flow.router,
        workers.router, graphs.router,
    )  # fmt: skip
    for router in routers:
        app.include_router(router)
    openapi.install(app)
    docs.install(app, openapi_url=openapi.URL)  # Swagger UI at /docs, no CDN
    dashboard.install(app, ctx)  # the web UI at / (its own package; calls the engine facade too)
    # add_middleware wraps: the last added is the outermost.
    app.add_middleware(Unexpected)
    app.add_middleware(Idempotency, ctx=lambda: ctx)
    app.add_middleware(SingleValuedQuery)
    app.add_middleware(BodyLimit, max_bytes=s.api_max_body_bytes, raw={"/api/v1/packs": s.packs_max_bytes + 65536},
                       under={"/api/v1/hooks/": s.inbound_max_body_bytes})  # fmt: skip
    app.add_middleware(RequestMetrics, metrics=metrics)
    if s.tracing:  # outermost: the request's span covers everything the app does for it
        from jobengine.tracing import TraceHeaders  # the otel extra, only when tracing is on

        app.add_middleware(TraceHeaders)
    return app
