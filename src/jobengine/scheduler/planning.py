"""The planner: what one run of a schedule creates. Planner functions, registered by name on
``engine.schedules``, compute a run's items at fire time; the template splits them into segments
(``core.firing.plan_jobs``).

    @engine.schedules.planner("changed-files")
    async def changed_files(ctx: PlanContext) -> list[str]:
        return await list_files(since=ctx.tick)     # [] -> the run completes at once as no_work

A planner that raises (or returns something that is not a list) does not stop the scheduler: its run is
recorded as ``error`` with the reason, and the tick is used up (it does not fire again).

A graph template (:class:`~jobengine.core.graph_template.GraphTemplate`) makes a run that fires one graph:
the graph's id is the run's id, and its nodes are the run's jobs (one segment each), so the run ends when
the graph's last node ended and counts its nodes in its summary (:func:`plan_graph`).

A run request template (:class:`~jobengine.core.request_template.RequestTemplate`) makes a run through the
run-request path (:data:`PlanRequest`, ``engine.runs``): the run is the request's, of its stream, so an
incremental tick takes the items after the stream's cursor (:func:`plan_request_run`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jobengine.core import firing
from jobengine.core.graph_template import GraphTemplate, NodeTemplate
from jobengine.core.graphs import GraphSpec, NodeSpec
from jobengine.core.ids import GraphId, RunId, ScheduleId
from jobengine.core.models import Json, NewJob, check_name
from jobengine.core.request_template import RequestTemplate
from jobengine.core.run_requests import RunRequest
from jobengine.core.runs import Run, RunState, RunSummary, RunTrigger
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.errors import ConfigError, JobEngineError, StoreError
from jobengine.ports.schedules import PlannedRun
from jobengine.tasks import TaskRegistry

PlannerFn = Callable[["PlanContext"], "Sequence[Json] | Awaitable[Sequence[Json] | None] | None"]
#: Plans the run of a run request without writing it (``engine.runs``): request, tenant, now, actor.
PlanRequest = Callable[[RunRequest, str, float, "str | None"], Awaitable[PlannedRun]]


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What a planner function is told. ``tick`` None: a manual trigger or a retry. ``dry_run``: a
    simulation asks (nothing will be created; a planner with side effects should skip them).
    ``trigger_data``: the JSON that came with a trigger (an inbound hook's event), else None."""

    schedule_id: ScheduleId
    spec: ScheduleSpec
    tick: float | None
    trigger: RunTrigger
    dry_run: bool = False
    trigger_data: Json = None


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    """One future tick of a simulation: what its run would be."""

    tick: float
    jobs: tuple[NewJob, ...]
    items: tuple[int, ...]  # items per job
    no_work: bool = False
    error: str | None = None  # the planner failed: the run would be recorded as error


@dataclass(frozen=True, slots=True)
class Simulation:
    spec: ScheduleSpec
    fire_times: tuple[float, ...]
    runs: tuple[SimulatedRun, ...]


class PlannerRegistry:
    def __init__(self) -> None:
        self._planners: dict[str, PlannerFn] = {}

    def add(self, name: str, fn: PlannerFn) -> None:
        check_name("planner", name)
        if name in self._planners:
            raise ConfigError(f"planner {name!r} is registered twice")
        self._planners[name] = fn

    def get(self, name: str) -> PlannerFn | None:
        return self._planners.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._planners))


class PlannerError(Exception):
    """The planner could not make a run's items (its message becomes the run's reason)."""


async def items_of(planners: PlannerRegistry, ctx: PlanContext) -> list[Json] | None:
    """The run's items: the template's list, or what its planner returns; None: the template does not fan
    out (one job). Raises PlannerError."""
    template = ctx.spec.template
    if isinstance(template, GraphTemplate):
        return None
    if template.planner is None:
        return None if template.items is None else list(template.items)
    fn = planners.get(template.planner)
    if fn is None:
        raise PlannerError(f"planner {template.planner!r} is not registered in this process")
    try:
        result: Any = fn(ctx)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        raise PlannerError(f"planner {template.planner!r} raised {type(exc).__name__}: {exc}") from exc
    if result is None:
        return []
    if isinstance(result, str | bytes) or not isinstance(result, Sequence):
        raise PlannerError(f"planner {template.planner!r} returned {type(result).__name__}, expected a list")
    return list(result)


async def plan_run(
    planners: PlannerRegistry,
    tasks: TaskRegistry,
    run: Run,
    spec: ScheduleSpec,
    *,
    dry_run: bool = False,
    plan_request: PlanRequest | None = None,
) -> PlannedRun:
    """``run`` (state queued, summary empty) with its jobs, or born ``completed`` / ``no_work`` when there
    are no items, or ``error`` when planning failed. ``plan_request`` plans a run request template's run."""
    now = run.created_at
    try:
        ctx = PlanContext(run.schedule_id, spec, run.tick, run.trigger, dry_run, run.trigger_data)
        items = await items_of(planners, ctx)
        run_at = None
        if run.tick is not None and spec.jitter:
            run_at = run.tick + firing.jitter_offset(run.schedule_id, run.tick, spec.jitter)
        if isinstance(spec.template, GraphTemplate):
            return plan_graph(tasks, run, spec.template, run_at=run_at)
        if isinstance(spec.template, RequestTemplate):
            if plan_request is None:
                raise PlannerError("a run request template needs the runs service to plan its run")
            return await plan_request_run(plan_request, run, spec.template, items or [], run_at=run_at)
        return fan_out(tasks, run, spec.template, items, run_at=run_at)
    except (PlannerError, ValueError) as exc:  # ValueError: InvalidSchedule / InvalidJob from the items
        reason = str(exc)[:2000]
        return PlannedRun(replace(run, state=RunState.ERROR, reason=reason, finished_at=now, updated_at=now))


async def plan_request_run(
    plan_request: PlanRequest,
    run: Run,
    template: RequestTemplate,
    items: Sequence[Json],
    *,
    run_at: float | None = None,
) -> PlannedRun:
    """The run of ``template``'s request over ``items``, with ``run``'s id, trigger and tick. Its
    ``schedule_id`` is the request's stream, as for every run request: the stream's cursor, its one
    unfinished incremental run and its runs' history are found by it; ``trigger_data`` names the schedule.
    Raises InvalidSchedule for items a request cannot take, PlannerError when the request cannot be planned."""
    request = template.request(items, run_id=run.id, reason=run.reason)
    try:
        planned = await plan_request(request, run.tenant, run.created_at, run.actor)
    except StoreError:
        raise
    except JobEngineError as exc:  # e.g. no approved version of a pack's task: the tick's run errs, once
        raise PlannerError(f"run request of {template.task!r}: {exc}") from exc
    data: dict[str, Json] = dict(planned.run.trigger_data) if isinstance(planned.run.trigger_data, Mapping) else {}
    data["schedule_id"] = run.schedule_id
    if run.trigger_data is not None:
        data["trigger_data"] = run.trigger_data
    made = replace(planned.run, trigger=run.trigger, tick=run.tick, fired_by=run.fired_by, trigger_data=data)
    jobs = planned.jobs if run_at is None else tuple(replace(j, run_at=run_at) for j in planned.jobs)
    return replace(planned, run=made, jobs=jobs)


def fan_out(
    tasks: TaskRegistry, run: Run, template: JobTemplate, items: Sequence[Json] | None, *, run_at: float | None = None
) -> PlannedRun:
    """``run`` with a job per segment of ``items`` (one job when None), or born ``completed`` / ``no_work``
    without items. Raises InvalidSchedule / InvalidJob for items the jobs cannot take."""
    now = run.created_at
    registered = tasks.get(template.task)
    defaults = (
        firing.JobDefaults(registered.queue, registered.priority, registered.max_attempts)
        if registered is not None
        else firing.JobDefaults()
    )
    jobs, counts = firing.plan_jobs(
        template, items, tenant=run.tenant, run_id=run.id, schedule_id=run.schedule_id, run_at=run_at,
        defaults=defaults,
    )  # fmt: skip
    if not jobs:
        return PlannedRun(replace(run, state=RunState.COMPLETED, no_work=True, started_at=now, finished_at=now))
    phases = tuple(tasks.phase_names(j.task) for j in jobs)
    run = replace(run, state=RunState.QUEUED, items=sum(counts), summary=RunSummary(total=len(jobs)))
    return PlannedRun(run, tuple(jobs), phases, tuple(counts))


def _defaults(tasks: TaskRegistry, task: str) -> firing.JobDefaults:
    registered = tasks.get(task)
    if registered is None:
        return firing.JobDefaults()
    return firing.JobDefaults(registered.queue, registered.priority, registered.max_attempts)


def plan_graph(tasks: TaskRegistry, run: Run, template: GraphTemplate, *, run_at: float | None = None) -> PlannedRun:
    """``run`` firing one graph of ``template``'s nodes: the graph's id is the run's, each node's job is a
    segment of the run (no items), parents first. Raises InvalidJob for a node the jobs cannot take."""

    def job(node: NodeTemplate) -> NewJob:
        defaults = _defaults(tasks, node.task)
        return NewJob(
            task=node.task, payload=node.payload, queue=node.queue or defaults.queue,
            priority=node.priority if node.priority is not None else defaults.priority,
            max_attempts=node.max_attempts if node.max_attempts is not None else defaults.max_attempts,
            timeout=node.timeout, tenant=run.tenant, run_at=run_at, run_id=run.id, schedule_id=run.schedule_id,
        )  # fmt: skip

    nodes = tuple(NodeSpec(n.name, job(n), n.after, n.policy) for n in template.nodes)
    graph = GraphSpec(template.name, run.tenant, nodes, id=GraphId(run.id))
    jobs = tuple(graph.jobs())
    phases = tuple(tasks.phase_names(j.task) for j in jobs)
    run = replace(run, state=RunState.QUEUED, items=0, summary=RunSummary(total=len(jobs)))
    return PlannedRun(run, jobs, phases, (0,) * len(jobs), graph=graph)


def new_run(
    run_id: RunId,
    schedule_id: ScheduleId,
    tenant: str,
    trigger: RunTrigger,
    now: float,
    *,
    tick: float | None = None,
    reason: str | None = None,
    actor: str | None = None,
    parent_id: RunId | None = None,
    fired_by: str | None = None,
    trigger_data: Json = None,
) -> Run:
    return Run(
        id=run_id, schedule_id=schedule_id, tenant=tenant, state=RunState.QUEUED, trigger=trigger,
        created_at=now, updated_at=now, tick=tick, reason=reason, actor=actor, parent_id=parent_id,
        fired_by=fired_by, trigger_data=trigger_data,
    )  # fmt: skip
