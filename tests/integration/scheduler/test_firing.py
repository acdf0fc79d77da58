"""Firing through the engine: misfire policies, overlap, exactly once between racing schedulers, and the
daylight-saving days of Europe/Paris, all on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion
from jobengine.core.runs import RunFilter, RunState
from jobengine.core.schedules import JobTemplate, MisfirePolicy, OverlapPolicy, ScheduleSpec
from jobengine.engine import Engine
from jobengine.settings import Settings

from .conftest import T0

pytestmark = pytest.mark.timeout(300)


def every(seconds: float, name: str = "s", **fields: object) -> ScheduleSpec:
    return ScheduleSpec(name=name, every=seconds, template=JobTemplate(task="work"), **fields)  # type: ignore[arg-type]


async def ticks_of(engine: Engine) -> list[float]:
    return sorted(r.tick for r in await engine.runs.list(RunFilter(limit=10_000)) if r.tick is not None)


@pytest.mark.parametrize(
    ("policy", "n", "expected"),
    [(MisfirePolicy.SKIP, 0, 0), (MisfirePolicy.RUN_ONCE, 0, 1), (MisfirePolicy.CATCH_UP, 3, 3),
     (MisfirePolicy.CATCH_UP, 10, 5)],
)  # fmt: skip
async def test_a_scheduler_stopped_for_five_ticks(
    engine: Engine, clock: ManualClock, policy: MisfirePolicy, n: int, expected: int
) -> None:
    """Acceptance: stopped for 5 ticks then restarted, it fires 0 (skip), 1 (run_once) or min(5, N)
    (catch_up N) runs for them."""
    await engine.schedules.create(every(100, misfire=policy, catch_up=n))
    clock.set(T0 + 100.5)
    assert len(await engine.scheduler.fire_due_schedules()) == 1  # on time
    clock.set(T0 + 630)  # down from T0+100.5: ticks 200..600 (5 of them) passed, all beyond the 15 s grace
    fired = await engine.scheduler.fire_due_schedules()
    assert len(fired) == expected
    assert [r.tick for r in fired] == [T0 + t for t in (200, 300, 400, 500, 600)][5 - expected :]
    misfired = [e for e in await engine.events(limit=1000) if e.type == "schedule.misfired"]
    assert [e.data["skipped"] for e in misfired] == ([5 - expected] if expected < 5 else [])
    clock.set(T0 + 700.2)
    assert [r.tick for r in await engine.scheduler.fire_due_schedules()] == [T0 + 700]  # back to normal


async def test_ticks_late_within_the_grace_all_fire(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(every(1))
    clock.set(T0 + 12.5)  # a fail-over of 12 s: 12 ticks late, within the 15 s grace
    assert len(await engine.scheduler.fire_due_schedules()) == 12
    assert await ticks_of(engine) == [T0 + i for i in range(1, 13)]


async def test_overlap_skip_never_overlaps_runs(engine: Engine, clock: ManualClock) -> None:
    """Acceptance (on a manual clock): a job longer than the interval; ticks while it runs are skipped."""
    await engine.schedules.create(every(10, overlap=OverlapPolicy.SKIP))
    clock.set(T0 + 10)
    (first,) = await engine.scheduler.fire_due_schedules()
    (job,) = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 300)
    for t in (20, 30, 40):  # the job runs for 35 s
        clock.set(T0 + t)
        assert await engine.scheduler.fire_due_schedules() == []
    clock.set(T0 + 45)
    assert job.lease_token is not None
    await engine.transitions.complete_jobs([Completion(job.id, job.lease_token)])
    done = await engine.runs.get(first.id)
    assert done.state is RunState.COMPLETED and done.finished_at == T0 + 45
    clock.set(T0 + 50)
    (second,) = await engine.scheduler.fire_due_schedules()
    assert second.tick == T0 + 50 and second.created_at >= done.finished_at
    skipped = [e.data["tick"] for e in await engine.events(limit=1000) if e.type == "schedule.skipped"]
    assert skipped == [T0 + 20, T0 + 30, T0 + 40]


async def test_overlap_queue_runs_one_after_another(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(every(10, overlap=OverlapPolicy.QUEUE))
    clock.set(T0 + 10)
    await engine.scheduler.fire_due_schedules()
    clock.set(T0 + 20)
    (waiting,) = await engine.scheduler.fire_due_schedules()
    assert waiting.state is RunState.PLANNING
    assert await engine.scheduler.plan_waiting_runs() == []  # the first is still queued
    (job,) = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 300)
    assert job.lease_token is not None
    await engine.transitions.complete_jobs([Completion(job.id, job.lease_token)])
    (planned,) = await engine.scheduler.plan_waiting_runs()
    assert planned.id == waiting.id and planned.state is RunState.QUEUED and planned.tick == T0 + 20
    (job2,) = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 300)
    assert job2.run_id == waiting.id


async def test_two_schedulers_racing_fire_each_tick_once(tmp_path: Path) -> None:
    """No leader at all: two engines on one SQLite file call the scheduler pass at the same instants."""
    clock = ManualClock(T0)
    settings = Settings(database=str(tmp_path / "race.db"))
    async with Engine.from_settings(settings, clock) as a, Engine.from_settings(settings, clock) as b:
        await a.schedules.create(every(1))
        fired = 0
        for i in range(1, 61):
            clock.set(T0 + i + 0.001)
            results = await asyncio.gather(a.scheduler.fire_due_schedules(), b.scheduler.fire_due_schedules())
            fired += sum(len(r) for r in results)
        assert fired == 60
        assert await ticks_of(a) == [T0 + i for i in range(1, 61)]


async def test_a_changed_cadence_applies_from_now(engine: Engine, clock: ManualClock) -> None:
    s = await engine.schedules.create(every(100))
    clock.set(T0 + 250)
    changed = await engine.schedules.update(s.id, every=50, actor="bob")
    assert (changed.version, changed.cursor, changed.next_fire_at) == (2, T0 + 250, T0 + 300)
    assert await engine.scheduler.fire_due_schedules() == []  # ticks 100 and 200 of the old cadence never fire
    paused = await engine.schedules.pause("s", actor="bob")
    assert paused.next_fire_at is None
    clock.set(T0 + 1000)
    assert await engine.scheduler.fire_due_schedules() == []
    resumed = await engine.schedules.resume("s", actor="bob")
    assert resumed.next_fire_at == T0 + 1050  # ticks missed while paused are not fired
    clock.set(T0 + 1050)
    assert [r.tick for r in await engine.scheduler.fire_due_schedules()] == [T0 + 1050]


PARIS = ZoneInfo("Europe/Paris")


async def _day(engine: Engine, clock: ManualClock, start: datetime, end: datetime) -> dict[str, list[str]]:
    """Run the scheduler from ``start`` to ``end`` as its loop does (a pass just after each next fire time,
    and one at every whole hour, between ticks, which must fire nothing), and return each schedule's fire
    times in local time."""
    for name, cron in (("at-0230", "30 2 * * *"), ("hourly", "0 * * * *"), ("half-hourly", "*/30 * * * *")):
        await engine.schedules.create(
            ScheduleSpec(name=name, cron=cron, timezone="Europe/Paris", template=JobTemplate(task="work"))
        )
    while (nxt := await engine.scheduler.next_schedule_fire_at()) is not None and nxt < end.timestamp():
        clock.set(nxt + 0.5)
        assert await engine.scheduler.fire_due_schedules()
        clock.set(nxt + 900)
        assert await engine.scheduler.fire_due_schedules() == []  # a quarter past: nothing is due
    names = {s.id: s.name for s in await engine.schedules.list()}
    out: dict[str, list[str]] = {n: [] for n in names.values()}
    for run in sorted(await engine.runs.list(RunFilter(limit=10_000)), key=lambda r: r.tick or 0):
        assert run.tick is not None
        out[names[run.schedule_id]].append(datetime.fromtimestamp(run.tick, PARIS).strftime("%H:%M%z"))
    return out


async def test_spring_forward_day_in_paris(engine: Engine, clock: ManualClock) -> None:
    """Acceptance: on 2024-03-31, 02:00-02:59 does not exist; a skipped local time fires at most once."""
    start = datetime(2024, 3, 31, 0, 0, 1, tzinfo=PARIS)
    clock.set(start.timestamp())
    fired = await _day(engine, clock, start, datetime(2024, 4, 1, tzinfo=PARIS))
    assert fired["at-0230"] == ["03:00+0200"]  # 02:30 does not exist: once, at the end of the gap
    assert fired["hourly"][:3] == ["01:00+0100", "03:00+0200", "04:00+0200"] and len(fired["hourly"]) == 22
    assert fired["half-hourly"][:4] == ["00:30+0100", "01:00+0100", "01:30+0100", "03:00+0200"]
    assert len(fired["half-hourly"]) == 45  # 00:30 to 01:30, then 03:00 to 23:30
    for times in fired.values():
        assert len(times) == len(set(times))


async def test_fall_back_day_in_paris(engine: Engine, clock: ManualClock) -> None:
    """Acceptance: on 2024-10-27, 02:00-02:59 happens twice; a repeated local time fires exactly once."""
    start = datetime(2024, 10, 27, 0, 0, 1, tzinfo=PARIS)
    clock.set(start.timestamp())
    fired = await _day(engine, clock, start, datetime(2024, 10, 28, tzinfo=PARIS))
    assert fired["at-0230"] == ["02:30+0200"]  # the first 02:30 only
    assert fired["hourly"][:4] == ["01:00+0200", "02:00+0200", "03:00+0100", "04:00+0100"]
    assert len(fired["hourly"]) == 23  # 01:00 to 23:00 of a 25-hour day: the repeated 02:00 fires once
    assert fired["half-hourly"][3:7] == ["02:00+0200", "02:30+0200", "03:00+0100", "03:30+0100"]
    assert len(fired["half-hourly"]) == 47
