"""``/healthz`` (liveness: the process answers), ``/readyz`` (the store, each transport and the services of
this process that registered a check: runner, planner) and ``/metrics`` (Prometheus; scope ``metrics``,
because it counts every tenant's jobs)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from prometheus_client import generate_latest
from starlette.responses import Response

from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.flow_metrics import render_flow_metrics
from jobengine.http.problems import problem_responses
from jobengine.http.responses import json_response
from jobengine.http.schemas import StatusOut

router = APIRouter(tags=["health"])

_METRICS: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}
}


@router.get("/healthz", response_model=StatusOut)
async def healthz() -> Response:
    """Liveness: 200 while the process serves requests (it checks nothing else, so a slow database never
    gets a healthy process restarted)."""
    return json_response({"status": "ok", "checks": {}})


@router.get("/readyz", response_model=StatusOut, responses={503: {"model": StatusOut, "description": "Not ready"}})
async def readyz(request: Request) -> Response:
    """Readiness: 200 when every check passes, else 503 with each check's detail."""
    results = await context(request).engine.health.readiness()
    ready = all(ok for ok, _ in results.values())
    checks = {name: {"ready": ok, "detail": detail} for name, (ok, detail) in results.items()}
    return json_response({"status": "ready" if ready else "not ready", "checks": checks}, 200 if ready else 503)


@router.get("/metrics", response_class=Response, responses={**_METRICS, **problem_responses(401, 403, 503)})
async def metrics(request: Request, principal: Annotated[Principal, Depends(require("metrics"))]) -> Response:
    ctx = context(request)
    engine = ctx.engine
    counts = await engine.queues.counts.counts()  # cheap however many finished jobs the store keeps
    settings = await engine.queues.settings()
    ctx.metrics.set_store_gauges(counts, {q: s.paused for q, s in settings.items()})
    ctx.metrics.set_graph_gauges(await engine.graphs.counts())
    body = ctx.metrics.render() + await render_flow_metrics(engine)
    # The queue transports (planner, runner) keep their own registry: depth and counters per transport.
    await engine.transports.refresh_metrics()
    body += generate_latest(engine.transports.metrics.registry)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
