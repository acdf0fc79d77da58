"""``/api/v1/jobs``: enqueue (one or a batch), get, list with filters and cursor paging, cancel, retry,
replay a dead job. Every call is scoped to the key's tenant: another tenant's job answers 404."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from jobengine.core.bounds import check_time
from jobengine.core.ids import JobId
from jobengine.core.models import Job, JobFilter, NewJob, check_filter
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.longpoll import Wait, until_ended
from jobengine.http.problems import ProblemError, problem_responses
from jobengine.http.responses import ENQUEUE, READ, READ_ONE, WRITE, WRITE_ONE, json_response
from jobengine.http.schemas import (
    NAME_PATTERN,
    BulkIn,
    BulkOut,
    CancelIn,
    JobBatchIn,
    JobBatchOut,
    JobFilterIn,
    JobIn,
    JobOut,
    JobPage,
    Moment,
)
from jobengine.serialize import bulk_to_json, job_to_json

router = APIRouter(prefix="/api/v1", tags=["jobs"])

ID_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
#: A job's id or a unique prefix of it (engine.jobs.resolve).
JobIdPath = Annotated[str, Path(min_length=1, max_length=100, pattern=ID_PATTERN)]
Cursor = Annotated[
    str | None,
    Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$", description="`next_cursor` of a page"),
]
NameQuery = Annotated[str | None, Query(min_length=1, max_length=200, pattern=NAME_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=500)]


def new_job(engine: Engine, tenant: str, body: JobIn) -> NewJob:
    return engine.new_job(
        body.task,
        body.payload,
        queue=body.queue,
        priority=body.priority,
        run_at=body.run_at,
        delay=body.delay,
        max_attempts=body.max_attempts,
        idempotency_key=body.idempotency_key,
        depends_on=body.depends_on,
        tenant=tenant,
        timeout=body.timeout,
    )


def job_page(jobs: Sequence[Job], limit: int, waiting: Mapping[JobId, str] | None = None) -> dict[str, object]:
    """A page of jobs; the cursor is the last id, as ids sort by creation time (newest first here).
    ``waiting``: why some of them wait (:meth:`Fleet.waiting_reasons`)."""
    why = waiting or {}
    return {
        "items": [job_to_json(j, why.get(j.id)) for j in jobs],
        "next_cursor": jobs[-1].id if len(jobs) >= limit else None,
    }


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobOut,
    responses={200: {"model": JobOut, "description": "An existing job with the same idempotency_key"}, **ENQUEUE},
)
async def enqueue_job(
    body: JobIn, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Enqueue one job. 201 with the new job, or 200 with the existing one when its ``idempotency_key``
    was used before with the same task, queue and payload (409 if they differ)."""
    engine = context(request).engine
    [(job, created)] = await engine.enqueue_for(principal.tenant, [new_job(engine, principal.tenant, body)])
    # Flow control: the header always, the field only under pressure (the body is the job's otherwise).
    level = (await engine.queues.pressure(job.queue)).value
    out = job_to_json(job, (await engine.fleet.waiting_reasons([job])).get(job.id))
    body_out = out if level == "none" else {**out, "queue_pressure": level}
    return json_response(body_out, 201 if created else 200,
                         {"Location": f"/api/v1/jobs/{job.id}", "X-Queue-Pressure": level})  # fmt: skip


@router.post("/jobs/batch", status_code=201, response_model=JobBatchOut, responses=ENQUEUE)
async def enqueue_batch(
    body: JobBatchIn, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Enqueue up to 1000 jobs in one transaction: all of them, or (on any error) none. A job may depend
    on a job earlier in the batch."""
    engine = context(request).engine
    stored = await engine.enqueue_for(principal.tenant, [new_job(engine, principal.tenant, j) for j in body.jobs])
    levels = {q: (await engine.queues.pressure(q)).value for q in sorted({j.queue for j, _ in stored})}
    worst = next((v for v in ("hard", "soft") if v in levels.values()), "none")
    body_out = {
        "jobs": [job_to_json(j) for j, _ in stored],
        "created": [c for _, c in stored],
        "queue_pressure": levels,
    }
    return json_response(body_out, 201, {"X-Queue-Pressure": worst})


def only_params(*names: str) -> Callable[[Request], None]:
    """A dependency that answers 400 naming the first query parameter not among ``names``: a misspelt
    filter must not silently return everything."""
    allowed = frozenset(names)

    def check(request: Request) -> None:
        for name in request.query_params:
            if name not in allowed:
                known = ", ".join(sorted(allowed))
                raise ProblemError(400, f"{name}: not a parameter of this list (known: {known})", field=name)

    return check


LIST_PARAMS = ("state", "queue", "task", "limit", "cursor", "id", "created_after", "created_before", "payload")


@router.get(
    "/jobs", response_model=JobPage, responses={**READ, **problem_responses(400)},
    dependencies=[Depends(only_params(*LIST_PARAMS))],
)  # fmt: skip
async def list_jobs(
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    state: Annotated[list[JobState] | None, Query(max_length=9)] = None,
    queue: NameQuery = None,
    task: NameQuery = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    id: Annotated[
        str | None, Query(min_length=1, max_length=100, pattern=ID_PATTERN, description="Ids starting with this")
    ] = None,
    created_after: Annotated[Moment | None, Query(description="Created after this time (ISO 8601 with a zone)")] = None,
    created_before: Annotated[Moment | None, Query(description="Created before this time")] = None,
    payload: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="A substring of the payload's JSON, case as written"),
    ] = None,
) -> Response:
    """The tenant's jobs, newest first, optionally of some states, one queue, one task, ids starting with
    ``id``, created in a time range, with ``payload`` in their payload's JSON. An unknown parameter is 400."""
    before = JobId(cursor) if cursor is not None else None
    filt = job_filter(principal.tenant, JobFilterIn(state=state, queue=queue, task=task, id=id,
                      created_after=created_after, created_before=created_before, payload=payload), limit)  # fmt: skip
    filt = replace(filt, before_id=before)
    engine = context(request).engine
    jobs = await engine.list_jobs(filt)
    return json_response(job_page(jobs, limit, await engine.fleet.waiting_reasons(jobs)))


def job_filter(tenant: str, f: JobFilterIn, limit: int) -> JobFilter:
    """The store's filter for what a request selects (InvalidJob naming the field for what no store takes)."""
    return check_filter(JobFilter(
        tenant=tenant, states=tuple(f.state or ()), queue=f.queue, task=f.task, limit=limit, id_prefix=f.id,
        created_after=check_time("created_after", f.created_after) if f.created_after is not None else None,
        created_before=check_time("created_before", f.created_before) if f.created_before is not None else None,
        payload_text=f.payload,
    ))  # fmt: skip


@router.post("/jobs/actions", response_model=BulkOut, responses=WRITE)
async def bulk_action(
    body: BulkIn, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Cancel, retry, replay or delete many jobs: those of ``ids``, or the newest ``limit`` that ``filter``
    selects. Jobs the action does not apply to are left as they are and listed in ``refused`` with why;
    the jobs are changed in chunks, each in one transaction. 422 when neither or both of ids and filter."""
    engine = context(request).engine
    filt = job_filter(principal.tenant, body.filter, body.limit) if body.filter is not None else None
    result = await engine.jobs.apply(
        body.action, ids=body.ids, filter=filt, tenant=principal.tenant, reason=body.reason, limit=body.limit
    )
    return json_response(bulk_to_json(result))


@router.get("/jobs/{job_id}", response_model=JobOut, responses={**READ_ONE, **problem_responses(409)})
async def get_job(
    job_id: JobIdPath,
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:read"))],
    wait: Wait = None,
) -> Response:
    """A job by its id or a unique prefix of it (8 characters at least; 409 naming candidates when several
    jobs start with it)."""
    engine = context(request).engine
    job = await engine.jobs.resolve(job_id, principal.tenant)
    if wait:  # a long poll (jobengine.http.longpoll); another tenant's job was 404 above
        job = await until_ended(request, job, wait)
    return json_response(job_to_json(job, (await engine.fleet.waiting_reasons([job])).get(job.id)))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, responses=WRITE_ONE)
async def cancel_job(
    job_id: JobIdPath,
    request: Request,
    principal: Annotated[Principal, Depends(require("jobs:write"))],
    body: CancelIn | None = None,
) -> Response:
    """Cancel a job that has not run yet at once; ask a running one to stop (it ends ``cancelled``).
    409 if it already finished."""
    reason = body.reason if body is not None else "cancelled by user"
    engine = context(request).engine
    job = await engine.cancel(await engine.jobs.resolve_id(job_id, principal.tenant), reason, principal.tenant)
    return json_response(job_to_json(job))


@router.post("/jobs/{job_id}/retry", response_model=JobOut, responses=WRITE_ONE)
async def retry_job(
    job_id: JobIdPath, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Queue a dead, cancelled or failed job again now, with a fresh attempt budget (409 otherwise)."""
    engine = context(request).engine
    job = await engine.retry(await engine.jobs.resolve_id(job_id, principal.tenant), principal.tenant)
    return json_response(job_to_json(job))


@router.post("/jobs/{job_id}/replay", response_model=JobOut, responses=WRITE_ONE)
async def replay_job(
    job_id: JobIdPath, request: Request, principal: Annotated[Principal, Depends(require("jobs:write"))]
) -> Response:
    """Replay a dead job (from the dead-letter): queued again with a fresh attempt budget (409 if not dead)."""
    engine = context(request).engine
    job = await engine.replay(await engine.jobs.resolve_id(job_id, principal.tenant), principal.tenant)
    return json_response(job_to_json(job))
