"""How a run request becomes a run (``engine.runs.start``) or a preview of one (``engine.runs.preview``):
read the stream's cursor and what earlier runs of the stream already did, pick the items
(:func:`jobengine.core.run_requests.plan_items`) and fan them out into segments as a schedule's run does.
Reads only; the caller writes the planned run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from jobengine.core.ids import RunId, ScheduleId, new_run_id
from jobengine.core.models import Json
from jobengine.core.run_requests import ItemPlan, RunMode, RunRequest, plan_items, request_of
from jobengine.core.runs import Run, RunFilter, RunState, RunTrigger
from jobengine.core.schedules import JobTemplate
from jobengine.core.states import JobState
from jobengine.errors import IllegalState
from jobengine.ports.schedules import PlannedRun, RunCursor, SchedulingStore
from jobengine.ports.store import Store
from jobengine.scheduler.planning import fan_out, new_run
from jobengine.tasks import TaskRegistry

#: How many of a stream's newest runs are searched for segments that already did items past the cursor.
RUNS_SEARCHED: Final = 100
#: How many items a preview shows.
SAMPLE: Final = 20


@dataclass(frozen=True, slots=True)
class RunPreview:
    """What a run request would do, written nowhere: the stream's ``cursor``, the items it would take
    (``plan``), how many jobs they make and a ``sample`` of the first items.

    Usage::

        preview = await engine.runs.preview(RunRequest(task="score", items=ids, mode=RunMode.INCREMENTAL))
        print(len(preview.plan.todo), "items in", preview.segments, "jobs")
    """

    request: RunRequest
    cursor: RunCursor | None
    plan: ItemPlan
    segments: int

    @property
    def sample(self) -> tuple[Json, ...]:
        """The first items the run would take."""
        return self.plan.todo[:SAMPLE]

    def to_json(self) -> dict[str, Json]:
        """The preview as the API answers it (``RunPreviewOut``)."""
        p, c = self.plan, self.cursor
        return {
            "task": self.request.task, "source": self.request.source, "mode": self.request.mode.value,
            "cursor": None if c is None else {"value": c.value, "run_id": c.run_id},
            "items": len(self.request.items), "todo": len(p.todo), "before_cursor": p.before_cursor,
            "done": p.done, "segments": self.segments, "cursor_to": p.move_to, "sample": list(self.sample),
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunTask:
    """What a request's jobs run: the ``task`` name they keep (a pack's task pinned to its digest), the
    ``queue`` it defaults to (None: the engine's), and for a pack the version it is (``pack``, kept in the
    run's ``trigger_data``)."""

    task: str
    queue: str | None = None
    pack: dict[str, Json] | None = None


async def as_is(request: RunRequest) -> RunTask:
    """The run task of a request whose task is run under its own name."""
    return RunTask(request.task)


def _succeeded_fully(run: Run) -> bool:
    return run.state is RunState.COMPLETED and run.summary.succeeded == run.summary.total


async def items_done(store: SchedulingStore, jobs: Store, tenant: str, stream: str) -> list[Json]:
    """The items that succeeded segments did in the stream's newest runs that did not all succeed (a run
    that did moved the cursor past its items) and in its retry runs, simulations left out."""
    runs = await store.list_runs(RunFilter(tenant=tenant, schedule_id=ScheduleId(stream), limit=RUNS_SEARCHED))
    # A retry run moves no cursor, so its segments count as done however it ended.
    searched = [r for r in runs if (not _succeeded_fully(r) or r.trigger is RunTrigger.RETRY) and r.summary.succeeded]
    partial = await store.get_runs([r.id for r in searched])
    done: list[Json] = []
    for run in partial:
        if request_of(run.trigger_data).get("mode") == RunMode.SIMULATE.value:
            continue
        segments = await store.run_segments(run.id)
        for job in await jobs.get_jobs([s.job_id for s in segments if s.outcome is JobState.SUCCEEDED]):
            if isinstance(job.payload, dict) and isinstance(job.payload.get("items"), list):
                done.extend(job.payload["items"])
    return done


async def preview(
    store: SchedulingStore,
    jobs: Store,
    tasks: TaskRegistry,
    request: RunRequest,
    tenant: str,
    now: float,
    actor: str | None = None,
    task: RunTask | None = None,
) -> tuple[RunPreview, PlannedRun]:
    """The preview of ``request`` and the run it would write (with the id ``request.run_id`` or a new one);
    its jobs run ``task`` (default: the request's task as it is named)."""
    cursor = await store.get_cursor(tenant, request.stream)
    done = [] if request.mode is not RunMode.INCREMENTAL else await items_done(store, jobs, tenant, request.stream)
    plan = plan_items(request, None if cursor is None else cursor.value, done)
    run = new_run(
        RunId(request.run_id) if request.run_id else new_run_id(), ScheduleId(request.stream), tenant,
        RunTrigger.REQUEST, now, reason=request.reason, actor=actor,
    )  # fmt: skip
    task = task or RunTask(request.task)
    planned = fan_out_request(tasks, request, run, plan.todo, task)
    data: dict[str, Json] = {
        "request": request.to_json(),
        "cursor_from": None if cursor is None else cursor.value,
        "cursor_to": plan.move_to,
        "skipped": {"before_cursor": plan.before_cursor, "done": plan.done},
    }
    if task.pack is not None:
        data["pack"] = task.pack
    planned = replace(
        planned,
        run=replace(planned.run, trigger_data=data, mode=request.mode.value),
        stream=request.stream,
        cursor_to=plan.move_to,
    )
    return RunPreview(request, cursor, plan, len(planned.jobs)), planned


def fan_out_request(
    tasks: TaskRegistry, request: RunRequest, run: Run, items: Sequence[Json], task: RunTask | None = None
) -> PlannedRun:
    """``run`` with a job per segment of ``items``, each job running ``task`` (default: the request's task)
    and carrying what ``request`` hands it."""
    task = task or RunTask(request.task)
    template = JobTemplate(
        task=task.task, payload=request.payload(), queue=request.queue or task.queue, priority=request.job_priority,
        segment_size=request.segment_size,
    )  # fmt: skip
    return fan_out(tasks, run, template, list(items))


def same_request(run: Run, request: RunRequest, tenant: str) -> Run:
    """``run`` when it was made by ``request`` in ``tenant``; raises IllegalState (409) otherwise."""
    if run.tenant != tenant or request_of(run.trigger_data) != request.to_json():
        raise IllegalState(f"run_id {request.run_id!r} already names a run made by a different request")
    return run
