"""``/api/v1/queues`` (depth, pause, resume, limits) and ``/api/v1/dead-letter`` (list, replay, purge).

Counts are the tenant's own jobs. A queue's paused flag and concurrency limit are shared by every tenant
(workers serve queues, not tenants), so changing them takes the ``queues:write`` scope: an operator's
action. Queue names in paths cannot contain ``/``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from jobengine.core.ids import JobId
from jobengine.core.models import JobFilter
from jobengine.core.states import RUNNABLE, JobState
from jobengine.engine.queues import QueueInfo
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.responses import READ, WRITE, json_response
from jobengine.http.routes.jobs import Cursor, Limit, NameQuery, job_page
from jobengine.http.schemas import (
    DeadReplayOut,
    DeadSelectIn,
    JobPage,
    PurgeOut,
    QueueLimitsIn,
    QueueList,
    QueueOut,
)
from jobengine.serialize import job_to_json

router = APIRouter(prefix="/api/v1", tags=["queues"])
dead_router = APIRouter(prefix="/api/v1/dead-letter", tags=["dead-letter"])

QueuePath = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-@]{0,199}$")]


def queue_to_json(info: QueueInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "counts": dict(info.counts),
        "depth": sum(info.counts.get(s.value, 0) for s in RUNNABLE),
        "paused": info.paused,
        "concurrency": info.concurrency,
    }


async def _updated(request: Request, principal: Principal, queue: str, **changes: Any) -> Response:
    """The queue as the tenant sees it once ``changes`` (shared by every tenant) are stored."""
    engine = context(request).engine
    await engine.queues.update(queue, **changes)
    return json_response(queue_to_json(await engine.queues.get(queue, principal.tenant)))


@router.get("/queues", response_model=QueueList, responses=READ)
async def list_queues(request: Request, principal: Annotated[Principal, Depends(require("jobs:read"))]) -> Response:
    """Every queue with jobs of the tenant or with settings: the tenant's counts by state, paused, limit."""
    infos = await context(request).engine.queues.list(principal.tenant)
    return json_response({"items": [queue_to_json(i) for i in infos]})


@router.get("/queues/{queue}", response_model=QueueOut, responses=READ)
async def get_queue(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("jobs:read"))]
) -> Response:
    """One queue (a queue nobody used yet has zero counts: queues exist by name)."""
    return json_response(queue_to_json(await context(request).engine.queues.get(queue, principal.tenant)))


@router.post("/queues/{queue}/pause", response_model=QueueOut, responses=WRITE)
async def pause_queue(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("queues:write"))]
) -> Response:
    """Stop workers from claiming jobs of the queue (jobs running now finish). Enqueueing still works."""
    return await _updated(request, principal, queue, paused=True)


@router.post("/queues/{queue}/resume", response_model=QueueOut, responses=WRITE)
async def resume_queue(
    queue: QueuePath, request: Request, principal: Annotated[Principal, Depends(require("queues:write"))]
) -> Response:
    return await _updated(request, principal, queue, paused=False)


@router.put("/queues/{queue}/limits", response_model=QueueOut, responses=WRITE)
async def set_queue_limits(
    queue: QueuePath,
    body: QueueLimitsIn,
    request: Request,
    principal: Annotated[Principal, Depends(require("queues:write"))],
) -> Response:
    """At most ``concurrency`` jobs of the queue run at once, over all workers (null removes the limit)."""
    return await _updated(request, principal, queue, concurrency=body.concurrency, unlimited=body.concurrency is None)


# -- dead-letter -------------------------------------------------------------------------------------
@dead_router.get("", response_model=JobPage, responses=READ)
async def list_dead(
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    queue: NameQuery = None,
    task: NameQuery = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> Response:
    """The tenant's dead jobs (attempts exhausted or not retryable), newest first."""
    filt = JobFilter(tenant=principal.tenant, states=(JobState.DEAD,), queue=queue, task=task, limit=limit,
                     before_id=JobId(cursor) if cursor is not None else None)  # fmt: skip
    return json_response(job_page(await context(request).engine.list_jobs(filt), limit))


@dead_router.post("/replay", response_model=DeadReplayOut, responses=WRITE)
async def replay_dead(
    body: DeadSelectIn, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Queue dead jobs again with a fresh attempt budget: ``ids`` (those that are the tenant's dead jobs),
    or every dead job (of ``queue``), up to ``limit``."""
    jobs = await context(request).engine.queues.replay_dead(
        principal.tenant, ids=body.ids, queue=body.queue, limit=body.limit
    )
    return json_response({"replayed": [job_to_json(j) for j in jobs]})


@dead_router.post("/purge", response_model=PurgeOut, responses=WRITE)
async def purge_dead(
    body: DeadSelectIn, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Delete dead jobs now (each gets a ``job.deleted`` event): ``ids``, or every one (of ``queue``)."""
    n = await context(request).engine.queues.purge_dead(
        principal.tenant, ids=body.ids, queue=body.queue, limit=body.limit
    )
    return json_response({"purged": n})
