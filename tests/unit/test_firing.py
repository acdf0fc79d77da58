"""The scheduler's pure decisions: misfire policies, overlap, jitter, segments, and run summaries by delta."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobengine.core import runs as rn
from jobengine.core.cron import IntervalCadence
from jobengine.core.firing import (
    JobDefaults,
    TickAction,
    jitter_offset,
    overlap_action,
    plan_jobs,
    plan_ticks,
    split_items,
)
from jobengine.core.ids import JobId, RunId, ScheduleId
from jobengine.core.runs import Run, RunState, RunSummary, RunTrigger, Segment
from jobengine.core.schedules import JobTemplate, MisfirePolicy, OverlapPolicy
from jobengine.core.states import JobState
from jobengine.errors import InvalidSchedule

T0 = 1_700_000_000.0  # a multiple of 10
EVERY10 = IntervalCadence(10.0)


def test_an_on_time_tick_fires() -> None:
    plan = plan_ticks(EVERY10, T0, T0 + 10.2, 5.0, MisfirePolicy.SKIP, 0)
    assert plan.fire == (T0 + 10,) and plan.dropped == 0
    assert (plan.cursor, plan.next_fire_at) == (T0 + 10, T0 + 20)


def test_nothing_due_moves_nothing() -> None:
    plan = plan_ticks(EVERY10, T0, T0 + 3, 5.0, MisfirePolicy.SKIP, 0)
    assert plan.fire == () and plan.cursor == T0 and plan.next_fire_at == T0 + 10


@pytest.mark.parametrize(
    ("policy", "n", "fired"),
    [(MisfirePolicy.SKIP, 0, []), (MisfirePolicy.RUN_ONCE, 0, [50]), (MisfirePolicy.CATCH_UP, 3, [30, 40, 50]),
     (MisfirePolicy.CATCH_UP, 10, [10, 20, 30, 40, 50])],
)  # fmt: skip
def test_five_missed_ticks_fire_per_the_misfire_policy(policy: MisfirePolicy, n: int, fired: list[int]) -> None:
    # Down from T0 to T0 + 57: ticks 10..50 are more than the 5 s grace late.
    plan = plan_ticks(EVERY10, T0, T0 + 57, 5.0, policy, n)
    assert plan.fire == tuple(T0 + f for f in fired)
    assert plan.dropped == 5 - len(fired)
    assert plan.cursor == T0 + 50 and plan.next_fire_at == T0 + 60


def test_ticks_within_the_grace_all_fire_whatever_the_policy() -> None:
    # A fail-over: the new leader finds 3 ticks, all within the grace: none is a misfire.
    plan = plan_ticks(EVERY10, T0, T0 + 31, 25.0, MisfirePolicy.SKIP, 0)
    assert plan.fire == (T0 + 10, T0 + 20, T0 + 30) and plan.dropped == 0


def test_a_long_outage_is_counted_up_to_the_scan_limit() -> None:
    plan = plan_ticks(IntervalCadence(1.0), T0, T0 + 100_000, 5.0, MisfirePolicy.RUN_ONCE, 0)
    # On time: the 6 ticks within the grace (99,995 to 100,000); run_once adds the newest missed one.
    assert plan.fire == tuple(T0 + t for t in range(99_994, 100_001))
    assert plan.dropped_more and plan.dropped == 1000 - 7  # counted as far as the scan went
    assert plan.cursor == T0 + 100_000


def test_overlap() -> None:
    assert overlap_action(OverlapPolicy.SKIP, False) is TickAction.FIRE
    assert overlap_action(OverlapPolicy.ALLOW, True) is TickAction.FIRE
    assert overlap_action(OverlapPolicy.SKIP, True) is TickAction.SKIP
    assert overlap_action(OverlapPolicy.QUEUE, True) is TickAction.DEFER


def test_jitter_is_the_same_everywhere_and_within_bounds() -> None:
    offsets = [jitter_offset("s1", T0 + i, 30.0) for i in range(200)]
    assert all(0 <= o < 30 for o in offsets)
    assert len(set(offsets)) > 100
    assert jitter_offset("s1", T0, 30.0) == jitter_offset("s1", T0, 30.0)
    assert jitter_offset("s1", T0, 0.0) == 0.0


def test_items_split_into_segments() -> None:
    assert split_items([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert split_items([], 3) == []
    with pytest.raises(InvalidSchedule, match="segments"):
        split_items(list(range(20_001)), 2)


def test_plan_jobs_fans_out_with_run_and_schedule() -> None:
    template = JobTemplate(task="sync", payload={"region": "eu"}, items=("a", "b", "c"), segment_size=2, priority=5)
    jobs, counts = plan_jobs(template, ["a", "b", "c"], tenant="acme", run_id=RunId("r"),
                             schedule_id=ScheduleId("s"), run_at=T0, defaults=JobDefaults("imports", 1, 7))  # fmt: skip
    assert counts == [2, 1]
    assert [j.payload for j in jobs] == [
        {"region": "eu", "items": ["a", "b"], "segment": 0, "segments": 2},
        {"region": "eu", "items": ["c"], "segment": 1, "segments": 2},
    ]
    assert {(j.queue, j.priority, j.max_attempts, j.tenant, j.run_id, j.schedule_id, j.run_at) for j in jobs} == {
        ("imports", 5, 7, "acme", "r", "s", T0)
    }
    single, counts = plan_jobs(JobTemplate(task="t", payload=[1]), None, tenant="default", run_id=RunId("r"),
                               schedule_id=ScheduleId("s"), run_at=None, defaults=JobDefaults())  # fmt: skip
    assert [j.payload for j in single] == [[1]] and counts == [0]
    none, counts = plan_jobs(template, [], tenant="default", run_id=RunId("r"), schedule_id=ScheduleId("s"),
                             run_at=None, defaults=JobDefaults())  # fmt: skip
    assert none == [] and counts == []


# -- runs -------------------------------------------------------------------------------------------------
def run(total: int = 2, state: RunState = RunState.QUEUED) -> Run:
    return Run(RunId("r"), ScheduleId("s"), "default", state, RunTrigger.SCHEDULE, T0, T0,
               summary=RunSummary(total=total))  # fmt: skip


def seg(i: int, outcome: JobState | None = None) -> Segment:
    return Segment(RunId("r"), JobId(f"j{i}"), i, 1, outcome)


def test_a_run_starts_then_completes_by_deltas() -> None:
    r, s0, events = rn.apply_outcome(run(), seg(0), JobState.SUCCEEDED, 3.0, T0 + 5)
    assert (r.state, r.started_at, r.summary.succeeded, [e.type for e in events]) == (
        RunState.RUNNING, T0 + 5, 1, ["run.started"])  # fmt: skip
    assert s0.outcome is JobState.SUCCEEDED and s0.duration == 3.0
    assert rn.apply_outcome(r, s0, JobState.SUCCEEDED, 3.0, T0 + 6)[2] == []  # the same outcome counts once
    r, _, events = rn.apply_outcome(r, seg(1), JobState.SUCCEEDED, 1.0, T0 + 7)
    assert (r.state, r.finished_at, [e.type for e in events]) == (RunState.COMPLETED, T0 + 7, ["run.completed"])
    assert r.summary == RunSummary(2, 2, 0, 0, 4.0, 3.0)


@pytest.mark.parametrize(
    ("outcomes", "final"),
    [((JobState.SUCCEEDED, JobState.DEAD), RunState.ERROR), ((JobState.CANCELLED, JobState.CANCELLED),
     RunState.CANCELLED), ((JobState.SUCCEEDED, JobState.CANCELLED), RunState.COMPLETED)],
)  # fmt: skip
def test_how_a_run_ends(outcomes: tuple[JobState, JobState], final: RunState) -> None:
    r = run()
    for i, outcome in enumerate(outcomes):
        r, _, _ = rn.apply_outcome(r, seg(i), outcome, None, T0)
    assert r.state is final


def test_a_cancelled_run_keeps_counting_but_stays_cancelled() -> None:
    r, events = rn.cancel(run(), "stop", "alice", T0)
    assert r.state is RunState.CANCELLED and events[0].data["actor"] == "alice"
    r, _, events = rn.apply_outcome(r, seg(0), JobState.CANCELLED, None, T0)
    assert r.state is RunState.CANCELLED and r.summary.cancelled == 1 and events == []
    assert rn.cancel(r, "again", "bob", T0) == (r, [])


def test_a_retried_job_reopens_an_ended_run() -> None:
    r = replace(run(1, RunState.ERROR), summary=RunSummary(total=1, dead=1))
    r, s, events = rn.apply_outcome(r, seg(0, JobState.DEAD), None, None, T0)
    assert (r.state, r.summary.dead, s.outcome, [e.type for e in events]) == (
        RunState.RUNNING, 0, None, ["run.reopened"])  # fmt: skip
    assert rn.apply_outcome(r, s, None, None, T0)[2] == []  # nothing to take back twice
