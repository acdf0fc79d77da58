"""Flow control on the queues resource: ``/api/v1/queues/{queue}/flow`` (the queue's limits: rate, burst,
key concurrency, depth limits, adaptive), ``/api/v1/queues/{queue}/scale`` (depth, throughput, latency
percentiles, recommended workers) and ``/api/v1/load`` (saturated or not, and the thresholds).

Like pause and limits, flow limits are shared by every tenant, so changing them takes ``queues:write``;
scale and load count every tenant's jobs, so reading them takes ``metrics``. The flow resource's ``depth``
is the caller's tenant's runnable jobs, as on ``/queues``; a key with ``metrics`` (an operator's view, also
implied by ``admin``) sees every tenant's, the depth that admission compares with the limits. ``pressure``
is the queue's admission state, which every enqueue already reports (``X-Queue-Pressure``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from jobengine.core.flow.limits import FlowLimits
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.flow_schemas import FlowLimitsIn, FlowLimitsOut, LoadOut, ScaleOut
from jobengine.http.responses import READ, WRITE, json_response
from jobengine.http.routes.queues import QueuePath

router = APIRouter(prefix="/api/v1", tags=["flow"])


async def _flow_json(
    request: Request, principal: Principal, queue: str, limits: FlowLimits | None
) -> dict[str, object]:
    engine = context(request).engine
    # Queues are shared lanes, their depth is not: a tenant's key counts its own jobs only.
    depth = await engine.queues.depth(queue, None if principal.allows("metrics") else principal.tenant)
    return {
        "queue": queue,
        "limits": limits.to_json() if limits is not None else None,
        "current_rate": engine.flow.rate(limits) if limits is not None else None,
        "pressure": (await engine.queues.pressure(queue)).value,
        "depth": depth,
    }


@router.get("/queues/{queue}/flow", response_model=FlowLimitsOut, responses=READ)
async def get_flow(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("jobs:read"))]
) -> Response:
    """The queue's flow limits (configured, or set through the API), its current rate and pressure."""
    limits = (await context(request).engine.flow.limits(fresh=True)).get(queue)
    return json_response(await _flow_json(request, principal, queue, limits))


@router.put("/queues/{queue}/flow", response_model=FlowLimitsOut, responses=WRITE)
async def set_flow(
    queue: QueuePath,
    body: FlowLimitsIn,
    request: Request,
    principal: Annotated[Principal, Depends(require("queues:write"))],
) -> Response:
    """Replace the queue's flow limits (every worker of every process applies them within a second)."""
    limits = await context(request).engine.flow.set_limits(queue, **body.model_dump())
    return json_response(await _flow_json(request, principal, queue, limits))


@router.delete("/queues/{queue}/flow", response_model=FlowLimitsOut, responses=WRITE)
async def clear_flow(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("queues:write"))]
) -> Response:
    """Remove the limits set through the API (configured ones, if any, apply again)."""
    engine = context(request).engine
    await engine.flow.clear_limits(queue)
    return json_response(await _flow_json(request, principal, queue, (await engine.flow.limits(fresh=True)).get(queue)))


@router.get("/queues/{queue}/scale", response_model=ScaleOut, responses=READ)
async def get_scale(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("metrics"))]
) -> Response:
    """Depth, throughput and latency percentiles over the last minute, and the worker slots that would
    drain the backlog within ``scale_target_seconds``."""
    return json_response(asdict(await context(request).engine.flow.scale(queue)))


@router.get("/load", response_model=LoadOut, responses=READ)
async def get_load(request: Request, principal: Annotated[Principal, Depends(require("metrics"))]) -> Response:
    """Whether the service sheds low-priority work now, why, and the thresholds (``shed_*`` settings)."""
    engine = context(request).engine
    state = await engine.flow.load_state()
    s = engine.settings
    thresholds = {"depth": s.shed_depth, "in_flight": s.shed_in_flight, "latency": s.shed_latency,
                  "min_priority": s.shed_min_priority}  # fmt: skip
    return json_response({"state": state.state.value, "reasons": list(state.reasons), "thresholds": thresholds})
