"""``/api/v1/runs`` (list, get, trigger or request, preview, cancel, retry, replay, a run's jobs, a simulate
run's diff) and
``/api/v1/signatures`` (failure signatures: list, get, change status). Scoped to the key's tenant; reads
(and a preview) take ``schedules:read``, actions ``schedules:write``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import RunFilter, RunState, RunTrigger
from jobengine.core.signatures import SignatureFilter, SignatureStatus
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.responses import READ, READ_ONE, READ_ONE_IF, WRITE_ONE, json_response
from jobengine.http.routes.jobs import Cursor, NameQuery
from jobengine.http.routes.schedules import actor
from jobengine.http.scheduler_schemas import (
    RunActionIn,
    RunDiffOut,
    RunJobsOut,
    RunOut,
    RunPage,
    RunPreviewOut,
    RunRequestIn,
    RunTriggerIn,
    SchedulePreviewIn,
    SignatureList,
    SignatureOut,
    SignaturePatch,
    SimulationOut,
)
from jobengine.serialize import job_to_json, run_to_json, segment_to_json, signature_to_json, simulation_to_json

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])
signatures = APIRouter(prefix="/api/v1/signatures", tags=["failure signatures"])

RunIdPath = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
KeyPath = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")]
Reader = Annotated[Principal, Depends(require("schedules:read"))]
Writer = Annotated[Principal, Depends(require("schedules:write"))]
#: A schedule's id, or a run request's stream ("<task> <source>", which is its runs' schedule_id).
ScheduleQuery = Annotated[
    str | None, Query(min_length=1, max_length=401, pattern=r"^[A-Za-z0-9_.:\-@/]+( [A-Za-z0-9_.:\-@/]+)?$")
]


@router.get("", response_model=RunPage, responses=READ)
async def list_runs(
    request: Request,
    principal: Reader,
    schedule_id: ScheduleQuery = None,
    state: Annotated[list[RunState] | None, Query(max_length=6)] = None,
    trigger: Annotated[RunTrigger | None, Query()] = None,
    mode: Annotated[RunMode | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> Response:
    """The tenant's runs, newest first; ``schedule_id``: a schedule's, or a run request stream's
    (``"<task> <source>"``); ``mode``: only the runs of run requests in that mode."""
    filt = RunFilter(
        tenant=principal.tenant, schedule_id=ScheduleId(schedule_id) if schedule_id else None,
        states=tuple(state or ()), trigger=trigger, limit=limit, before_id=RunId(cursor) if cursor else None,
        mode=mode.value if mode else None,
    )  # fmt: skip
    runs = await context(request).engine.runs.list(filt)
    page = {"items": [run_to_json(r) for r in runs], "next_cursor": runs[-1].id if len(runs) >= limit else None}
    return json_response(page)


@router.post("", status_code=201, response_model=RunOut, responses=WRITE_ONE)
async def start_run(body: RunTriggerIn | RunRequestIn, request: Request, principal: Writer) -> Response:
    """Fire a run of ``schedule`` now, by hand, with a reason; or run ``task`` over ``items`` (a run
    request: full, incremental or simulate; the same ``run_id`` and request again answer the same run)."""
    engine = context(request).engine
    if isinstance(body, RunTriggerIn):
        run = await engine.schedules.trigger(
            body.schedule, reason=body.reason, tenant=principal.tenant, actor=actor(principal)
        )
    else:
        run = await engine.runs.start(run_request(body), tenant=principal.tenant, actor=actor(principal))
    return json_response(run_to_json(run), 201, {"Location": f"/api/v1/runs/{run.id}"})


@router.post("/preview", response_model=RunPreviewOut | SimulationOut, responses=WRITE_ONE)
async def preview_run(body: RunRequestIn | SchedulePreviewIn, request: Request, principal: Reader) -> Response:
    """What a run request would take (counts, the cursor, a sample of the items), or a schedule's next
    fire times and the jobs of each run. Writes nothing."""
    engine = context(request).engine
    if isinstance(body, SchedulePreviewIn):
        sim = await engine.schedules.simulate(body.schedule, count=body.count, tenant=principal.tenant)
        return json_response(simulation_to_json(sim))
    return json_response((await engine.runs.preview(run_request(body), tenant=principal.tenant)).to_json())


def run_request(body: RunRequestIn) -> RunRequest:
    """The body as a RunRequest, which checks what the schema cannot (raises InvalidSchedule: 422)."""
    return RunRequest(**body.model_dump())


@router.get("/{run_id}", response_model=RunOut, responses=READ_ONE)
async def get_run(run_id: RunIdPath, request: Request, principal: Reader) -> Response:
    """The run, with ``trigger_data``: the JSON that came with its trigger (an inbound hook's event)."""
    run = await context(request).engine.runs.get(run_id, principal.tenant)
    return json_response(run_to_json(run, with_trigger_data=True))


@router.get("/{run_id}/jobs", response_model=RunJobsOut, responses=READ_ONE)
async def run_jobs(run_id: RunIdPath, request: Request, principal: Reader) -> Response:
    """The run's segments (items, outcome, duration) and their jobs (retention may have deleted some)."""
    engine = context(request).engine
    segments = await engine.runs.segments(run_id, principal.tenant)
    jobs = await engine.get_jobs([s.job_id for s in segments], principal.tenant)
    return json_response({"segments": [segment_to_json(s) for s in segments], "jobs": [job_to_json(j) for j in jobs]})


@router.post("/{run_id}/cancel", response_model=RunOut, responses=WRITE_ONE)
async def cancel_run(
    run_id: RunIdPath, request: Request, principal: Writer, body: RunActionIn | None = None
) -> Response:
    """Cancel an unfinished run: jobs that have not run are cancelled, running ones asked to stop (409 if
    the run already ended)."""
    reason = body.reason if body is not None and body.reason else "cancelled by user"
    run = await context(request).engine.runs.cancel(run_id, reason=reason, tenant=principal.tenant,
                                                   actor=actor(principal))  # fmt: skip
    return json_response(run_to_json(run))


@router.post("/{run_id}/retry", status_code=201, response_model=RunOut, responses=WRITE_ONE)
async def retry_run(
    run_id: RunIdPath, request: Request, principal: Writer, body: RunActionIn | None = None
) -> Response:
    """A new run with a copy of each of this ended run's dead or cancelled jobs (409 if none, or not ended)."""
    reason = body.reason if body is not None else None
    run = await context(request).engine.runs.retry(run_id, reason=reason, tenant=principal.tenant,
                                                  actor=actor(principal))  # fmt: skip
    return json_response(run_to_json(run), 201, {"Location": f"/api/v1/runs/{run.id}"})


@router.post("/{run_id}/replay", status_code=201, response_model=RunOut, responses=WRITE_ONE)
async def replay_run(
    run_id: RunIdPath, request: Request, principal: Writer, body: RunActionIn | None = None
) -> Response:
    """A new run of this ended run request's run over the same items, task version, mode and environment
    (``parent_id`` names this run; it is ``queued`` until a worker starts it and moves no cursor). 409 if the
    run has not ended, no run request made it, or retention deleted its jobs."""
    reason = body.reason if body is not None else None
    run = await context(request).engine.runs.replay(run_id, reason=reason, tenant=principal.tenant,
                                                   actor=actor(principal))  # fmt: skip
    return json_response(run_to_json(run), 201, {"Location": f"/api/v1/runs/{run.id}"})


@router.get("/{run_id}/diff", response_model=RunDiffOut, responses=READ_ONE_IF)
async def run_diff(
    run_id: RunIdPath,
    request: Request,
    principal: Reader,
    same: Annotated[bool, Query(description="Include the entries of unchanged items.")] = False,
) -> Response:
    """A finished simulate run, item by item, against the newest completed full run of the same task and
    source: same / changed / new / gone with both results. 409 if the run is not a simulate run or has not
    ended."""
    diff = await context(request).engine.runs.diff(run_id, principal.tenant)
    return json_response(diff.to_json(same=same))


# -- failure signatures ------------------------------------------------------------------------------
@signatures.get("", response_model=SignatureList, responses=READ)
async def list_signatures(
    request: Request,
    principal: Reader,
    status: Annotated[list[SignatureStatus] | None, Query(max_length=3)] = None,
    task: NameQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The tenant's failure signatures, most recently seen first."""
    filt = SignatureFilter(tenant=principal.tenant, statuses=tuple(status or ()), task=task, limit=limit)
    found = await context(request).engine.signatures.list(filt)
    return json_response({"items": [signature_to_json(s) for s in found]})


@signatures.get("/{key}", response_model=SignatureOut, responses=READ_ONE)
async def get_signature(key: KeyPath, request: Request, principal: Reader) -> Response:
    return json_response(signature_to_json(await context(request).engine.signatures.get(key, tenant=principal.tenant)))


@signatures.patch("/{key}", response_model=SignatureOut, responses=WRITE_ONE)
async def update_signature(key: KeyPath, body: SignaturePatch, request: Request, principal: Writer) -> Response:
    """Set the status (active / resolved / suppressed) and whether its failures may still retry."""
    engine = context(request).engine
    await engine.signatures.get(key, tenant=principal.tenant)  # 404 for an unknown or foreign signature
    signature = await engine.signatures.update(
        key, tenant=principal.tenant, status=body.status, non_retryable=body.non_retryable, actor=actor(principal)
    )
    return json_response(signature_to_json(signature))
