"""The ScheduleStore port on every backend: schedules, the exactly-once tick ledger, runs and summaries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobengine.core.ids import RunId, ScheduleId, new_run_id, new_schedule_id
from jobengine.core.models import JobFilter, NewEvent, NewJob
from jobengine.core.runs import JobOutcome, Run, RunFilter, RunState, RunSummary, RunTrigger
from jobengine.core.schedules import JobTemplate, OverlapPolicy, Schedule, ScheduleFilter, ScheduleSpec, audit_event
from jobengine.core.states import JobState
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.schedules import PlannedRun, SchedulingBackend, SchedulingStore, TickClaim
from jobengine.ports.store import Store

from .helpers import T0, claim, completion, failure, get

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def sched(store: Store) -> SchedulingStore:
    assert isinstance(store, SchedulingBackend)
    return store.scheduling()


def spec(name: str = "nightly", **fields: object) -> ScheduleSpec:
    values: dict[str, object] = {"every": 60.0, "template": JobTemplate(task="report")}
    values.update(fields)
    return ScheduleSpec(name=name, **values)  # type: ignore[arg-type]


def schedule(name: str = "nightly", now: float = T0, **fields: object) -> Schedule:
    s = spec(name, **fields)
    return Schedule(new_schedule_id(), s, 1, now, s.cadence().next_after(now), now, now, "alice", "alice")


def event(s: Schedule, type_: str = "schedule.created") -> NewEvent:
    return audit_event(type_, s.tenant, "alice", {"schedule_id": s.id})


def planned(s: Schedule, tick: float | None, jobs: int = 1, now: float = T0) -> PlannedRun:
    run_id = new_run_id()
    new = [NewJob(task="report", payload={"i": i}, run_id=run_id, schedule_id=s.id) for i in range(jobs)]
    run = Run(run_id, s.id, s.tenant, RunState.QUEUED, RunTrigger.SCHEDULE, now, now, tick=tick,
              summary=RunSummary(total=jobs), items=jobs)  # fmt: skip
    return PlannedRun(run, tuple(new), tuple(() for _ in new), tuple(1 for _ in new))


def tick_claim(s: Schedule, *runs: PlannedRun, overlap: OverlapPolicy = OverlapPolicy.ALLOW) -> TickClaim:
    ticks = [r.run.tick for r in runs if r.run.tick is not None]
    new_cursor = max(ticks) if ticks else s.cursor
    return TickClaim(s.id, s.version, s.cursor, new_cursor, new_cursor + 60, overlap, runs, fired_by="test")


# -- schedules ----------------------------------------------------------------------------------------
async def test_insert_get_find_list_and_the_audit_event(sched: SchedulingStore, store: Store) -> None:
    s = schedule()
    stored, events = await sched.insert_schedule(s, event(s))
    assert stored == s
    assert [e.type for e in events] == ["schedule.created"] and events[0].data["actor"] == "alice"
    assert await sched.get_schedules([s.id]) == [s]
    assert await sched.get_schedules([s.id], tenant="other") == []
    assert await sched.find_schedule("default", "nightly") == s
    assert await sched.find_schedule("other", "nightly") is None
    other = schedule("alpha", tenant="acme")
    await sched.insert_schedule(other, event(other))
    assert [x.name for x in await sched.list_schedules(ScheduleFilter())] == ["alpha", "nightly"]
    assert [x.name for x in await sched.list_schedules(ScheduleFilter(tenant="default"))] == ["nightly"]
    assert [e.type for e in await store.list_events(0, 100)] == ["schedule.created", "schedule.created"]


async def test_a_name_is_unique_per_tenant(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    with pytest.raises(AlreadyExists):
        await sched.insert_schedule(schedule(), event(s))
    elsewhere = schedule(tenant="acme")
    await sched.insert_schedule(elsewhere, event(elsewhere))


async def test_update_needs_the_version_it_read(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    changed = replace(s, spec=replace(s.spec, every=30.0), version=2)
    stored, _ = await sched.update_schedule(changed, 1, event(s, "schedule.updated"))
    assert (await sched.get_schedules([s.id]))[0].spec.every == 30.0
    with pytest.raises(IllegalState):
        await sched.update_schedule(replace(changed, version=3), 1, event(s))
    with pytest.raises(NotFound):
        await sched.update_schedule(replace(s, id=ScheduleId("nope")), 1, event(s))
    other = schedule("other")
    await sched.insert_schedule(other, event(other))
    with pytest.raises(AlreadyExists):
        await sched.update_schedule(replace(other, spec=replace(other.spec, name="nightly"), version=2), 1, event(s))
    assert stored.version == 2


async def test_delete_keeps_nothing_but_history(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    with pytest.raises(NotFound):
        await sched.delete_schedule(s.id, "other", T0, event(s))
    events = await sched.delete_schedule(s.id, None, T0 + 1, event(s, "schedule.deleted"))
    assert [e.type for e in events] == ["schedule.deleted"]
    assert await sched.get_schedules([s.id]) == []
    with pytest.raises(NotFound):
        await sched.delete_schedule(s.id, None, T0, event(s))


async def test_due_schedules_and_the_next_fire_time(sched: SchedulingStore) -> None:
    assert await sched.next_fire_at() is None
    soon, later = schedule("soon", every=10.0), schedule("later", every=100.0)
    paused = replace(schedule("paused", every=1.0, enabled=False), next_fire_at=None)
    for s in (soon, later, paused):
        await sched.insert_schedule(s, event(s))
    assert await sched.next_fire_at() == soon.next_fire_at
    assert await sched.due_schedules(T0 + 5, 10) == []
    assert [s.name for s in await sched.due_schedules(T0 + 1000, 10)] == ["soon", "later"]
    assert [s.name for s in await sched.due_schedules(T0 + 1000, 1)] == ["soon"]


# -- firing -------------------------------------------------------------------------------------------
async def test_a_claim_writes_the_run_its_jobs_and_moves_the_cursor(sched: SchedulingStore, store: Store) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, T0 + 60, jobs=2)
    fired = await sched.fire_ticks(tick_claim(s, p), T0 + 60)
    assert fired is not None
    assert [r.id for r in fired.runs] == [p.run.id]
    assert [j.run_id for j in fired.jobs] == [p.run.id, p.run.id]
    assert {j.schedule_id for j in fired.jobs} == {s.id}
    assert [e.type for e in fired.events] == ["job.enqueued", "job.enqueued", "run.created"]
    assert (await get(store, fired.jobs[0].id)).run_id == p.run.id  # stored, not only returned
    now = (await sched.get_schedules([s.id]))[0]
    assert (now.cursor, now.next_fire_at) == (T0 + 60, T0 + 120)
    assert [x.job_id for x in await sched.run_segments(p.run.id)] == [j.id for j in fired.jobs]


async def test_a_stale_claim_writes_nothing(sched: SchedulingStore, store: Store) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    first = await sched.fire_ticks(tick_claim(s, planned(s, T0 + 60)), T0 + 60)
    assert first is not None
    # A second scheduler read the schedule before the first claimed: same version, old cursor.
    assert await sched.fire_ticks(tick_claim(s, planned(s, T0 + 60)), T0 + 60) is None
    assert len(await sched.list_runs(RunFilter())) == 1
    assert len(await store.list_jobs(JobFilter())) == 1
    paused = replace((await sched.get_schedules([s.id]))[0], spec=replace(s.spec, enabled=False), version=2)
    await sched.update_schedule(paused, 1, event(s))
    assert await sched.fire_ticks(tick_claim(paused, planned(s, T0 + 120)), T0 + 120) is None


async def test_a_tick_never_fires_twice_even_when_the_cursor_allows_it(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    assert await sched.fire_ticks(tick_claim(s, planned(s, T0 + 60)), T0 + 60)
    # A claim that (wrongly) re-offers tick T0+60 with a newer one: only the new tick fires.
    s2 = (await sched.get_schedules([s.id]))[0]
    again = TickClaim(s.id, 1, s2.cursor, T0 + 120, T0 + 180, OverlapPolicy.ALLOW,
                      (planned(s, T0 + 60), planned(s, T0 + 120)))  # fmt: skip
    fired = await sched.fire_ticks(again, T0 + 120)
    assert fired is not None and [r.tick for r in fired.runs] == [T0 + 120]
    assert sorted(r.tick or 0 for r in await sched.list_runs(RunFilter())) == [T0 + 60, T0 + 120]


async def test_overlap_skip_records_the_tick_without_a_run(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    fired = await sched.fire_ticks(tick_claim(s, planned(s, T0 + 60), planned(s, T0 + 120),
                                              overlap=OverlapPolicy.SKIP), T0 + 120)  # fmt: skip
    assert fired is not None
    assert [r.tick for r in fired.runs] == [T0 + 60]
    assert fired.skipped == [T0 + 120]
    assert [e.type for e in fired.events if e.type.startswith("schedule.")] == ["schedule.skipped"]


async def test_overlap_queue_writes_a_waiting_run_planned_when_its_turn_comes(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    first, second = planned(s, T0 + 60), planned(s, T0 + 120, jobs=2)
    fired = await sched.fire_ticks(tick_claim(s, first, second, overlap=OverlapPolicy.QUEUE), T0 + 120)
    assert fired is not None
    assert [(r.id, r.state) for r in fired.runs] == [
        (first.run.id, RunState.QUEUED),
        (second.run.id, RunState.PLANNING),
    ]
    assert len(fired.jobs) == 1  # the waiting run has no jobs yet
    assert await sched.waiting_runs(10) == []  # its turn has not come: the first is queued
    assert await sched.plan_waiting_run(second, T0 + 121) is None
    (job,) = fired.jobs
    await sched.record_outcomes([JobOutcome(job.id, first.run.id, JobState.SUCCEEDED, 1.0)], T0 + 125)
    (waiting,) = await sched.waiting_runs(10)
    assert waiting.id == second.run.id
    planned_now = await sched.plan_waiting_run(second, T0 + 126)
    assert planned_now is not None and len(planned_now.jobs) == 2
    assert (await sched.get_runs([second.run.id]))[0].state is RunState.QUEUED
    assert await sched.plan_waiting_run(second, T0 + 127) is None  # planned once
    assert await sched.waiting_runs(10) == []


async def test_a_manual_run_and_its_audit_event(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, None)
    run = replace(p.run, trigger=RunTrigger.MANUAL, actor="bob", reason="re-send")
    fired = await sched.insert_run(replace(p, run=run), T0, audit_event("run.triggered", s.tenant, "bob", {}))
    assert fired.runs[0].trigger is RunTrigger.MANUAL and fired.runs[0].actor == "bob"
    assert [e.type for e in fired.events][-2:] == ["run.created", "run.triggered"]


async def test_a_runs_trigger_data_is_kept_through_its_progress_and_read_with_the_run(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, None, jobs=1)
    data = {"ref": "main", "files": ["a", "é"], "n": 1.5, "nested": {"ok": True, "none": None}}
    fired = await sched.insert_run(replace(p, run=replace(p.run, trigger=RunTrigger.MANUAL, trigger_data=data)), T0)
    (job,) = fired.jobs
    assert (await sched.get_runs([p.run.id]))[0].trigger_data == data
    await sched.start_runs([p.run.id], T0 + 1)
    await sched.record_outcomes([JobOutcome(job.id, p.run.id, JobState.SUCCEEDED, 1.0)], T0 + 2)
    run = (await sched.get_runs([p.run.id], s.tenant))[0]  # every column rewritten as the run ended
    assert run.state is RunState.COMPLETED and run.trigger_data == data
    other = planned(s, None)
    await sched.insert_run(replace(other, run=replace(other.run, trigger=RunTrigger.MANUAL)), T0 + 3)
    assert (await sched.get_runs([other.run.id]))[0].trigger_data is None


# -- progress -----------------------------------------------------------------------------------------
async def test_outcomes_move_the_summary_by_deltas_and_end_the_run(sched: SchedulingStore, store: Store) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, T0 + 60, jobs=3)
    fired = await sched.fire_ticks(tick_claim(s, p), T0 + 60)
    assert fired is not None
    a, b, c = fired.jobs
    events = await sched.start_runs([p.run.id, p.run.id], T0 + 61)
    assert [e.type for e in events] == ["run.started"]
    assert await sched.start_runs([p.run.id], T0 + 62) == []
    await sched.record_outcomes([JobOutcome(a.id, p.run.id, JobState.SUCCEEDED, 2.0)], T0 + 63)
    await sched.record_outcomes([JobOutcome(a.id, p.run.id, JobState.SUCCEEDED, 2.0)], T0 + 63)  # twice: once
    run = (await sched.get_runs([p.run.id]))[0]
    assert (run.state, run.summary.succeeded, run.summary.pending) == (RunState.RUNNING, 1, 2)
    events = await sched.record_outcomes(
        [JobOutcome(b.id, p.run.id, JobState.DEAD, 5.0), JobOutcome(c.id, p.run.id, JobState.CANCELLED, None)],
        T0 + 64,
    )
    assert [e.type for e in events] == ["run.error"]
    run = (await sched.get_runs([p.run.id]))[0]
    assert run.state is RunState.ERROR and run.finished_at == T0 + 64
    assert run.summary == RunSummary(3, 1, 1, 1, 7.0, 5.0)
    segments = await sched.run_segments(p.run.id)
    assert [x.outcome for x in segments] == [JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED]
    # The dead job is retried by hand: its outcome no longer counts and the run reopens.
    events = await sched.record_outcomes([JobOutcome(b.id, p.run.id, None)], T0 + 65)
    assert [e.type for e in events] == ["run.reopened"]
    run = (await sched.get_runs([p.run.id]))[0]
    assert (run.state, run.summary.dead, run.summary.pending) == (RunState.RUNNING, 0, 1)
    await sched.record_outcomes([JobOutcome(b.id, p.run.id, JobState.SUCCEEDED, 1.0)], T0 + 66)
    run = (await sched.get_runs([p.run.id]))[0]
    assert run.state is RunState.COMPLETED and run.summary.succeeded == 2
    assert await sched.record_outcomes([JobOutcome(b.id, RunId("other"), JobState.DEAD)], T0) == []


async def test_cancel_a_run(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, T0 + 60)
    await sched.fire_ticks(tick_claim(s, p), T0 + 60)
    with pytest.raises(NotFound):
        await sched.cancel_run(p.run.id, "acme", "no", "bob", T0)
    run, events = await sched.cancel_run(p.run.id, None, "not today", "bob", T0 + 61)
    assert run.state is RunState.CANCELLED and run.reason == "not today"
    assert [(e.type, e.data["actor"]) for e in events] == [("run.cancelled", "bob")]
    again, events = await sched.cancel_run(p.run.id, None, "again", "bob", T0 + 62)
    assert again.reason == "not today" and events == []


async def test_list_runs_filters_and_pages(sched: SchedulingStore) -> None:
    s, t = schedule("s"), schedule("t", tenant="acme")
    for x in (s, t):
        await sched.insert_schedule(x, event(x))
    await sched.fire_ticks(tick_claim(s, planned(s, T0 + 60, now=T0 + 60)), T0 + 60)
    manual = planned(t, None, now=T0 + 70)
    await sched.insert_run(replace(manual, run=replace(manual.run, trigger=RunTrigger.MANUAL)), T0 + 70)
    all_runs = await sched.list_runs(RunFilter())
    assert [r.created_at for r in all_runs] == [T0 + 70, T0 + 60]  # newest first
    assert [r.tenant for r in await sched.list_runs(RunFilter(tenant="acme"))] == ["acme"]
    assert len(await sched.list_runs(RunFilter(schedule_id=s.id))) == 1
    assert len(await sched.list_runs(RunFilter(trigger=RunTrigger.MANUAL))) == 1
    assert len(await sched.list_runs(RunFilter(states=(RunState.QUEUED,)))) == 2
    assert await sched.list_runs(RunFilter(states=(RunState.ERROR,))) == []
    assert len(await sched.list_runs(RunFilter(created_after=T0 + 65))) == 1
    assert len(await sched.list_runs(RunFilter(created_before=T0 + 65))) == 1
    assert [r.id for r in await sched.list_runs(RunFilter(before_id=all_runs[0].id))] == [all_runs[1].id]
    assert [r.id for r in await sched.active_runs(10)] == sorted(r.id for r in all_runs)
    assert [r.id for r in await sched.active_runs(10, after_id=min(r.id for r in all_runs))] == [max(
        r.id for r in all_runs)]  # fmt: skip


async def test_jobs_carry_run_and_schedule_through_every_transition(sched: SchedulingStore, store: Store) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    p = planned(s, T0 + 60, jobs=2)
    fired = await sched.fire_ticks(tick_claim(s, p), T0 + 60)
    assert fired is not None
    jobs = await claim(store, T0 + 61)
    assert {(j.run_id, j.schedule_id) for j in jobs} == {(p.run.id, s.id)}
    done = await store.complete_jobs([completion(jobs[0])], T0 + 62)
    failed = await store.fail_jobs([failure(jobs[1], T0 + 62)], T0 + 62)
    assert done.jobs[0].run_id == failed.jobs[0].run_id == p.run.id
    assert (await get(store, jobs[1].id)).schedule_id == s.id


# -- retention ----------------------------------------------------------------------------------------
async def test_prune_runs_deletes_ended_runs_and_old_tick_records_only(sched: SchedulingStore) -> None:
    s = schedule()
    await sched.insert_schedule(s, event(s))
    runs = []
    for k in (1, 2, 3):  # ticks at T0+60, +120, +180, each fired (recorded) at its own time
        current = (await sched.get_schedules([s.id]))[0]
        p = planned(current, T0 + 60 * k, jobs=2)
        assert await sched.fire_ticks(tick_claim(current, p), T0 + 60 * k)
        runs.append(p.run.id)
    first, second, third = runs
    await sched.cancel_run(first, None, "old", "bob", T0 + 200)
    await sched.cancel_run(second, None, "newer", "bob", T0 + 400)  # ended after the cut-off: kept

    assert await sched.prune_runs(T0 + 300, 1) == 2  # the limit holds: one run, one tick record
    assert await sched.get_runs([first]) == [] and await sched.run_segments(first) == []
    assert await sched.prune_runs(T0 + 300, 100) == 2  # the two other tick records older than the cut-off
    assert await sched.prune_runs(T0 + 300, 100) == 0
    kept = {r.id: r for r in await sched.get_runs([second, third])}
    assert set(kept) == {second, third} and kept[third].state is RunState.QUEUED  # a run still going stays
    assert len(await sched.run_segments(third)) == 2
    # The schedule's cursor still guards its old ticks: a claim made before them is refused.
    stale = TickClaim(s.id, s.version, s.cursor, T0 + 60, T0 + 120, OverlapPolicy.ALLOW, (planned(s, T0 + 60),))
    assert await sched.fire_ticks(stale, T0 + 500) is None


async def test_a_cursor_moves_only_when_every_segment_succeeded_and_never_down(sched: SchedulingStore) -> None:
    s = schedule()
    runs = [replace(planned(s, None, jobs=2), stream="score default", cursor_to=to) for to in ("k9", "k5", "k7")]
    written = [await sched.insert_run(p, T0) for p in runs]
    assert await sched.get_cursor("default", "score default") is None
    (a, b), (c, d), (e, f) = (w.jobs for w in written)
    ok = JobState.SUCCEEDED
    await sched.record_outcomes([JobOutcome(a.id, runs[0].run.id, ok), JobOutcome(b.id, runs[0].run.id, JobState.DEAD)],
                                T0 + 1)  # fmt: skip
    assert await sched.get_cursor("default", "score default") is None  # a dead segment: it stays
    await sched.record_outcomes([JobOutcome(c.id, runs[1].run.id, ok)], T0 + 2)
    assert await sched.get_cursor("default", "score default") is None  # one segment still to go
    await sched.record_outcomes([JobOutcome(d.id, runs[1].run.id, ok)], T0 + 3)
    cursor = await sched.get_cursor("default", "score default")
    assert cursor is not None and (cursor.value, cursor.run_id, cursor.updated_at) == ("k5", runs[1].run.id, T0 + 3)
    await sched.record_outcomes([JobOutcome(e.id, runs[2].run.id, ok), JobOutcome(f.id, runs[2].run.id, ok)], T0 + 4)
    assert (await sched.get_cursor("default", "score default")).value == "k7"  # type: ignore[union-attr]
    assert await sched.get_cursor("other", "score default") is None  # per tenant
    late = replace(planned(s, None, jobs=0), stream="score default", cursor_to="k6")
    late = replace(late, run=replace(late.run, state=RunState.COMPLETED, no_work=True, summary=RunSummary()))
    await sched.insert_run(late, T0 + 5)  # born completed: applied at once, and never down
    assert (await sched.get_cursor("default", "score default")).value == "k7"  # type: ignore[union-attr]
