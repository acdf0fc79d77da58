"""Runs through the engine: summaries as jobs end, manual triggers, cancel, retry, planners, reconcile, audit."""

from __future__ import annotations

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, Job
from jobengine.core.runs import RunFilter, RunState, RunTrigger
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import IllegalState, InvalidSchedule, NotFound
from jobengine.scheduler import PlanContext

from .conftest import T0

pytestmark = pytest.mark.timeout(300)


def fan_out(items: int = 3, name: str = "fan", **template: object) -> ScheduleSpec:
    t = JobTemplate(task="work", items=tuple(range(items)), **template)  # type: ignore[arg-type]
    return ScheduleSpec(name=name, every=100, template=t)


async def claim_all(engine: Engine) -> list[Job]:
    return await engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)


def failed(job: Job, engine: Engine, message: str = "boom", outcome: FailOutcome = FailOutcome.DEAD) -> Failure:
    assert job.lease_token is not None
    error = AttemptError(job.attempt, engine.clock.now(), "RuntimeError", message)
    return Failure(job.id, job.lease_token, error, outcome, engine.clock.now() + 10)


async def test_a_summary_follows_its_jobs(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(fan_out(3))
    clock.set(T0 + 100)
    (run,) = await engine.scheduler.fire_due_schedules()
    assert (run.state, run.items, run.summary.total) == (RunState.QUEUED, 3, 3)
    jobs = await claim_all(engine)
    assert (await engine.runs.get(run.id)).state is RunState.RUNNING
    clock.advance(4)
    await engine.transitions.complete_jobs([Completion(jobs[0].id, jobs[0].lease_token or "")])
    await engine.transitions.fail_jobs(
        [failed(jobs[1], engine, outcome=FailOutcome.RETRY)]
    )  # will retry: not an outcome
    mid = await engine.runs.get(run.id)
    assert (mid.summary.succeeded, mid.summary.dead, mid.summary.pending) == (1, 0, 2)
    await engine.transitions.fail_jobs([failed(jobs[2], engine)])
    clock.advance(10)
    (again,) = await claim_all(engine)
    clock.advance(2)
    await engine.transitions.complete_jobs([Completion(again.id, again.lease_token or "")])
    done = await engine.runs.get(run.id)
    assert done.state is RunState.ERROR  # one job ended dead
    assert (done.summary.succeeded, done.summary.dead, done.summary.duration_max) == (2, 1, 4.0)
    assert [j.id for j in await engine.runs.jobs(run.id)] == [j.id for j in jobs]
    segments = await engine.runs.segments(run.id)
    assert [s.outcome for s in segments] == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.DEAD]
    kinds = [e.type for e in await engine.events(limit=1000) if e.type.startswith("run.")]
    assert kinds == ["run.created", "run.started", "run.error"]


async def test_trigger_cancel_and_retry_by_hand(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(fan_out(4, segment_size=2), actor="alice")
    with pytest.raises(InvalidSchedule, match="reason"):
        await engine.schedules.trigger("fan", reason="", actor="bob")
    run = await engine.schedules.trigger("fan", reason="backfill after the outage", actor="bob")
    assert (run.trigger, run.actor, run.reason, run.tick, run.summary.total) == (
        RunTrigger.MANUAL, "bob", "backfill after the outage", None, 2)  # fmt: skip
    first, second = await claim_all(engine)
    await engine.transitions.complete_jobs([Completion(first.id, first.lease_token or "")])
    cancelled = await engine.runs.cancel(run.id, reason="wrong data", actor="carol")
    assert cancelled.state is RunState.CANCELLED
    assert (await engine.get_job(second.id)).cancel_requested  # running: asked to stop
    with pytest.raises(IllegalState, match="already cancelled"):
        await engine.runs.cancel(run.id, actor="carol")
    await engine.transitions.fail_jobs([failed(second, engine, outcome=FailOutcome.CANCELLED)])
    ended = await engine.runs.get(run.id)
    assert (ended.state, ended.summary.succeeded, ended.summary.cancelled) == (RunState.CANCELLED, 1, 1)
    retry = await engine.runs.retry(run.id, actor="dave")
    assert (retry.trigger, retry.parent_id, retry.summary.total, retry.items) == (RunTrigger.RETRY, run.id, 1, 2)
    (copy,) = await engine.runs.jobs(retry.id)
    assert copy.payload == second.payload and copy.run_id == retry.id
    with pytest.raises(IllegalState, match="only an ended run"):
        await engine.runs.retry(retry.id)
    with pytest.raises(NotFound):
        await engine.runs.get("nope")
    audit = [(e.type, e.data.get("actor")) for e in await engine.events(limit=1000) if not e.type.startswith("job.")]
    assert ("schedule.created", "alice") in audit
    assert ("run.created", "bob") in audit
    assert ("run.cancelled", "carol") in audit
    assert ("run.created", "dave") in audit
    manual = await engine.runs.list(RunFilter(trigger=RunTrigger.MANUAL))
    assert [r.id for r in manual] == [run.id]


async def test_cancel_a_run_that_has_not_started(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(fan_out(2))
    run = await engine.schedules.trigger("fan", reason="now", actor="bob")
    cancelled = await engine.runs.cancel(run.id, actor="carol")
    assert (cancelled.state, cancelled.summary.cancelled) == (RunState.CANCELLED, 2)
    assert {j.state for j in await engine.runs.jobs(run.id)} == {JobState.CANCELLED}


async def test_a_retried_job_reopens_its_run(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(fan_out(1))
    run = await engine.schedules.trigger("fan", reason="now", actor="bob")
    (job,) = await claim_all(engine)
    await engine.transitions.fail_jobs([failed(job, engine)])
    assert (await engine.runs.get(run.id)).state is RunState.ERROR
    await engine.retry(job.id)
    assert (await engine.runs.get(run.id)).state is RunState.RUNNING
    (job,) = await claim_all(engine)
    await engine.transitions.complete_jobs([Completion(job.id, job.lease_token or "")])
    assert (await engine.runs.get(run.id)).state is RunState.COMPLETED


async def test_planners_make_the_items(engine: Engine, clock: ManualClock) -> None:
    calls: list[PlanContext] = []

    @engine.schedules.planner("files")
    async def files(ctx: PlanContext) -> list[str]:
        calls.append(ctx)
        return [] if ctx.tick and ctx.tick >= T0 + 200 else ["a.csv", "b.csv"]

    engine.schedules.add_planner("broken", lambda ctx: 1 / 0)
    for name, planner in (("f", "files"), ("b", "broken"), ("u", "unknown")):
        template = JobTemplate(task="load", planner=planner)
        await engine.schedules.create(ScheduleSpec(name=name, every=100, template=template))
    clock.set(T0 + 100)
    runs = {r.schedule_id: r for r in await engine.scheduler.fire_due_schedules()}
    by_name = {s.name: s.id for s in await engine.schedules.list()}
    assert runs[by_name["f"]].summary.total == 2 and calls[-1].tick == T0 + 100 and not calls[-1].dry_run
    broken, unknown = runs[by_name["b"]], runs[by_name["u"]]
    assert broken.state is RunState.ERROR and "ZeroDivisionError" in (broken.reason or "")
    assert unknown.state is RunState.ERROR and "not registered in this process" in (unknown.reason or "")
    clock.set(T0 + 200)
    runs = {r.schedule_id: r for r in await engine.scheduler.fire_due_schedules()}
    nothing = runs[by_name["f"]]
    assert (nothing.state, nothing.no_work, nothing.summary.total) == (RunState.COMPLETED, True, 0)
    assert [j.payload["items"] for j in await engine.runs.jobs(runs[by_name["f"]].id)] == []


async def test_reconcile_catches_up_after_a_crash(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(fan_out(2))
    run = await engine.schedules.trigger("fan", reason="now", actor="bob")
    # A worker that claims and completes through the store directly: as if its process had died between
    # the commit of its jobs and the run's bookkeeping.
    now = clock.now()
    jobs = (await engine.store.fetch_jobs(["default"], 10, WorkerId("w"), 30, now)).jobs
    await engine.store.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs], now)
    assert (await engine.runs.get(run.id)).state is RunState.QUEUED
    assert await engine.scheduler.reconcile_runs() == 3  # started, and two outcomes
    done = await engine.runs.get(run.id)
    assert (done.state, done.summary.succeeded) == (RunState.COMPLETED, 2)
    assert await engine.scheduler.reconcile_runs() == 0


async def test_a_cancel_counts_a_job_that_ended_unrecorded_before_it(engine: Engine, clock: ManualClock) -> None:
    """A worker killed between the commit of its job and the run's bookkeeping: the run, cancelled next,
    still counts that job, as reconcile no longer looks at an ended run."""
    await engine.schedules.create(fan_out(2))
    run = await engine.schedules.trigger("fan", reason="now", actor="bob")
    now = clock.now()
    (done,) = (await engine.store.fetch_jobs(["default"], 1, WorkerId("w"), 30, now)).jobs
    await engine.store.complete_jobs([Completion(done.id, done.lease_token or "")], now)
    cancelled = await engine.runs.cancel(run.id, actor="carol")
    assert (cancelled.state, cancelled.summary.succeeded, cancelled.summary.cancelled) == (RunState.CANCELLED, 1, 1)
    outcomes = {s.job_id: s.outcome for s in await engine.runs.segments(run.id)}
    assert outcomes[done.id] is JobState.SUCCEEDED and set(outcomes.values()) == {JobState.SUCCEEDED,
                                                                                  JobState.CANCELLED}  # fmt: skip
