"""``/api/v1/schedules``: create, list, get, change, delete, pause, resume, trigger a run, simulate.

A schedule is named by its id or its name, within the key's tenant (another tenant's answers 404). Changes
are audited in the event log with the actor ``key:<key id>``. Reads take ``schedules:read``, changes
``schedules:write``. Names in paths cannot contain ``/``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from jobengine.core.cron import parse_duration
from jobengine.core.graph_template import GraphTemplate
from jobengine.core.request_template import RequestTemplate
from jobengine.core.schedules import JobTemplate, ScheduleFilter, ScheduleSpec, Template
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.graph_schemas import GraphIn
from jobengine.http.problems import problem_responses
from jobengine.http.responses import READ, READ_ONE, WRITE, WRITE_ONE, json_response
from jobengine.http.routes.jobs import NameQuery
from jobengine.http.scheduler_schemas import (
    RequestTemplateIn,
    RunOut,
    ScheduleIn,
    ScheduleList,
    ScheduleOut,
    SchedulePatch,
    SimulateIn,
    SimulateSpecIn,
    SimulationOut,
    TemplateIn,
    TriggerIn,
)
from jobengine.serialize import run_to_json, schedule_to_json, simulation_to_json

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])

Ref = Annotated[
    str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-@]{0,199}$", description="Id or name")
]
Reader = Annotated[Principal, Depends(require("schedules:read"))]
Writer = Annotated[Principal, Depends(require("schedules:write"))]


def actor(principal: Principal) -> str:
    return f"key:{principal.key_id}"


def template_of(t: TemplateIn | GraphIn | RequestTemplateIn) -> Template:
    if isinstance(t, GraphIn):
        return GraphTemplate.from_json(t.model_dump(mode="json", exclude_none=True))
    if isinstance(t, RequestTemplateIn):
        return RequestTemplate.from_json(t.model_dump(mode="json", exclude_none=True))
    return JobTemplate(
        task=t.task, payload=t.payload, queue=t.queue, priority=t.priority, max_attempts=t.max_attempts,
        items=tuple(t.items) if t.items is not None else None, planner=t.planner, segment_size=t.segment_size,
    )  # fmt: skip


def spec_of(body: ScheduleIn, tenant: str) -> ScheduleSpec:
    every = parse_duration(body.every, "every") if body.every is not None else None
    jitter = parse_duration(body.jitter, "jitter")
    return ScheduleSpec(
        name=body.name, template=template_of(body.template), cron=body.cron, every=every, timezone=body.timezone,
        overlap=body.overlap, misfire=body.misfire, catch_up=body.catch_up, jitter=jitter, enabled=body.enabled,
        tenant=tenant,
    )  # fmt: skip


@router.post("", status_code=201, response_model=ScheduleOut, responses=problem_responses(401, 403, 400, 409, 413,
                                                                                          415, 422, 503))  # fmt: skip
async def create_schedule(body: ScheduleIn, request: Request, principal: Writer) -> Response:
    """Store a schedule (409 if the tenant already has one of that name); it first fires at its next tick."""
    engine = context(request).engine
    schedule = await engine.schedules.create(spec_of(body, principal.tenant), actor=actor(principal))
    return json_response(schedule_to_json(schedule), 201, {"Location": f"/api/v1/schedules/{schedule.id}"})


@router.get("", response_model=ScheduleList, responses=READ)
async def list_schedules(
    request: Request,
    principal: Reader,
    name: NameQuery = None,
    enabled: Annotated[bool | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    filt = ScheduleFilter(tenant=principal.tenant, name=name, enabled=enabled, limit=limit)
    schedules = await context(request).engine.schedules.list(filt)
    return json_response({"items": [schedule_to_json(s) for s in schedules]})


@router.post("/simulate", response_model=SimulationOut, responses=WRITE)
async def simulate_spec(body: SimulateSpecIn, request: Request, principal: Reader) -> Response:
    """The next ``count`` fire times of a proposed schedule and the jobs each run would have. Writes nothing."""
    spec = spec_of(body.schedule, principal.tenant)
    sim = await context(request).engine.schedules.simulate(spec, count=body.count, after=body.after)
    return json_response(simulation_to_json(sim))


@router.get("/{ref}", response_model=ScheduleOut, responses=READ_ONE)
async def get_schedule(ref: Ref, request: Request, principal: Reader) -> Response:
    schedule = await context(request).engine.schedules.get(ref, principal.tenant)
    return json_response(schedule_to_json(schedule))


@router.patch("/{ref}", response_model=ScheduleOut, responses=WRITE_ONE)
async def update_schedule(ref: Ref, body: SchedulePatch, request: Request, principal: Writer) -> Response:
    """Change fields of a schedule (a new cadence applies from now: ticks before are not fired)."""
    changes: dict[str, Any] = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    engine = context(request).engine
    if not changes:  # nothing to change: the schedule as it is (404 if it is not the tenant's)
        return json_response(schedule_to_json(await engine.schedules.get(ref, principal.tenant)))
    if body.template is not None:
        changes["template"] = template_of(body.template)
    for key in ("every", "jitter"):  # durations may come as strings ("30s")
        if changes.get(key) is not None:
            changes[key] = parse_duration(changes[key], key)
    schedule = await engine.schedules.update(ref, tenant=principal.tenant, actor=actor(principal), **changes)
    return json_response(schedule_to_json(schedule))


@router.delete("/{ref}", status_code=204, response_class=Response, responses=READ_ONE)
async def delete_schedule(ref: Ref, request: Request, principal: Writer) -> Response:
    """Delete the schedule; its runs and their jobs stay (and go on if still running)."""
    await context(request).engine.schedules.delete(ref, tenant=principal.tenant, actor=actor(principal))
    return Response(status_code=204)


@router.post("/{ref}/pause", response_model=ScheduleOut, responses=WRITE_ONE)
async def pause_schedule(ref: Ref, request: Request, principal: Writer) -> Response:
    """Stop firing (runs already going continue); ticks while paused are never fired."""
    engine = context(request).engine
    return json_response(schedule_to_json(await engine.schedules.pause(ref, tenant=principal.tenant,
                                                                      actor=actor(principal))))  # fmt: skip


@router.post("/{ref}/resume", response_model=ScheduleOut, responses=WRITE_ONE)
async def resume_schedule(ref: Ref, request: Request, principal: Writer) -> Response:
    """Fire again from the next tick after now."""
    engine = context(request).engine
    return json_response(schedule_to_json(await engine.schedules.resume(ref, tenant=principal.tenant,
                                                                       actor=actor(principal))))  # fmt: skip


@router.post("/{ref}/trigger", status_code=201, response_model=RunOut, responses=WRITE_ONE)
async def trigger_schedule(ref: Ref, body: TriggerIn, request: Request, principal: Writer) -> Response:
    """Fire a run now, by hand, with a reason (also when paused)."""
    run = await context(request).engine.schedules.trigger(
        ref, reason=body.reason, tenant=principal.tenant, actor=actor(principal)
    )
    return json_response(run_to_json(run), 201, {"Location": f"/api/v1/runs/{run.id}"})


@router.post("/{ref}/simulate", response_model=SimulationOut, responses=WRITE_ONE)
async def simulate_schedule(ref: Ref, request: Request, principal: Reader, body: SimulateIn | None = None) -> Response:
    """The next ``count`` fire times of the schedule and the jobs each run would have. Writes nothing."""
    body = body or SimulateIn.model_validate({})
    sim = await context(request).engine.schedules.simulate(ref, count=body.count, after=body.after,
                                                          tenant=principal.tenant)  # fmt: skip
    return json_response(simulation_to_json(sim))
