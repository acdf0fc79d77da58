"""Schedules whose template is a run request: each tick starts one run through the run-request path (the
stream's cursor, its one unfinished incremental run), exactly once between racing schedulers; on SQLite
and PostgreSQL, on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.firing import tick_run_id
from jobengine.core.ids import ScheduleId, WorkerId
from jobengine.core.models import Completion, Job, Json
from jobengine.core.request_template import RequestTemplate
from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import RunFilter, RunState, RunTrigger
from jobengine.core.schedules import SCHEDULE_SKIPPED, OverlapPolicy, ScheduleSpec
from jobengine.engine import Engine
from jobengine.errors import IllegalState, InvalidSchedule
from jobengine.scheduler.planning import PlanContext

from .conftest import T0

pytestmark = pytest.mark.timeout(300)

STREAM = "score accounts"


def every(seconds: float, template: RequestTemplate, name: str = "r", **fields: object) -> ScheduleSpec:
    return ScheduleSpec(name=name, every=seconds, template=template, **fields)  # type: ignore[arg-type]


def incremental(**fields: object) -> RequestTemplate:
    values: dict[str, object] = {"task": "score", "mode": RunMode.INCREMENTAL, "source": "accounts",
                                 "planner": "accounts", "segment_size": 2, **fields}  # fmt: skip
    return RequestTemplate(**values)  # type: ignore[arg-type]


def growing_source(engine: Engine, source: list[Json]) -> None:
    """A planner that lists whatever ``source`` holds at fire time: the source grows between ticks."""

    @engine.schedules.planner("accounts")
    def accounts(ctx: PlanContext) -> list[Json]:
        return list(source)


async def claim(engine: Engine) -> list[Job]:
    return await engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)


async def complete_all(engine: Engine) -> list[Json]:
    """Complete every claimable job; the items they carried."""
    jobs = await claim(engine)
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs])
    return [i for j in jobs for i in j.payload["items"]]


async def test_three_incremental_ticks_over_a_growing_source_take_each_item_once(
    engine: Engine, clock: ManualClock
) -> None:
    source: list[Json] = [1, 2, 3]
    growing_source(engine, source)
    schedule = await engine.schedules.create(every(100, incremental()))
    done: list[Json] = []
    for n, added in enumerate(([4, 5], [6, 7, 8], []), start=1):
        clock.set(T0 + 100 * n)
        (run,) = await engine.scheduler.fire_due_schedules()
        assert (run.id, run.tick, run.trigger) == (tick_run_id(schedule.id, T0 + 100 * n), T0 + 100 * n,
                                                   RunTrigger.SCHEDULE)  # fmt: skip
        assert run.schedule_id == STREAM  # a run request's run belongs to its stream
        stored = await engine.runs.get(run.id)
        assert stored.mode == RunMode.INCREMENTAL.value
        assert isinstance(stored.trigger_data, dict) and stored.trigger_data["schedule_id"] == schedule.id
        done += await complete_all(engine)
        assert (await engine.runs.get(run.id)).state is RunState.COMPLETED
        source.extend(added)
    assert done == [1, 2, 3, 4, 5, 6, 7, 8]  # each item exactly once, in three runs
    cursor = await engine.store.scheduling().get_cursor("default", STREAM)
    assert cursor is not None and cursor.value == 8
    clock.set(T0 + 400)  # nothing new: the run has no work and leaves the cursor where it is
    (empty,) = await engine.scheduler.fire_due_schedules()
    assert (empty.state, empty.no_work) == (RunState.COMPLETED, True)


async def test_an_incremental_tick_continues_a_request_started_by_hand(engine: Engine, clock: ManualClock) -> None:
    """The schedule's runs and those of ``engine.runs.start`` share the stream's cursor."""
    growing_source(engine, [1, 2, 3, 4])
    await engine.runs.start(RunRequest(task="score", source="accounts", mode=RunMode.INCREMENTAL, items=(1, 2)))
    assert await complete_all(engine) == [1, 2]
    await engine.schedules.create(every(100, incremental()))
    clock.set(T0 + 100)
    await engine.scheduler.fire_due_schedules()
    assert await complete_all(engine) == [3, 4]


async def test_a_simulate_schedule_moves_no_cursor(engine: Engine, clock: ManualClock) -> None:
    growing_source(engine, [1, 2, 3])
    await engine.schedules.create(every(100, incremental(mode=RunMode.SIMULATE)))
    for n in (1, 2):
        clock.set(T0 + 100 * n)
        (run,) = await engine.scheduler.fire_due_schedules()
        assert await complete_all(engine) == [1, 2, 3]  # every item, each time
        ended = await engine.runs.get(run.id)
        assert (ended.state, ended.mode) == (RunState.COMPLETED, RunMode.SIMULATE.value)
    assert await engine.store.scheduling().get_cursor("default", STREAM) is None


async def test_two_schedulers_racing_start_one_run_per_tick(clock: ManualClock, engine: Engine) -> None:
    """No leader: two engines on one database call the scheduler pass at the same instants."""
    async with Engine.from_settings(engine.settings, clock) as other:
        for e in (engine, other):
            e.schedules.add_planner("items", lambda ctx: [1, 2, 3])
        template = RequestTemplate(task="score", mode=RunMode.FULL, planner="items", segment_size=1)
        schedule = await engine.schedules.create(every(1, template))
        fired = 0
        for i in range(1, 11):
            clock.set(T0 + i + 0.001)
            both = await asyncio.gather(engine.scheduler.fire_due_schedules(), other.scheduler.fire_due_schedules())
            fired += sum(len(r) for r in both)
        assert fired == 10
        runs = await engine.runs.list(RunFilter(schedule_id=ScheduleId("score default"), limit=100))
        assert sorted(r.id for r in runs) == sorted(tick_run_id(schedule.id, T0 + i) for i in range(1, 11))
        assert sum((await engine.count_jobs()).values()) == 30


@pytest.mark.parametrize("overlap", [OverlapPolicy.ALLOW, OverlapPolicy.SKIP])
async def test_an_incremental_tick_while_the_last_runs_is_skipped_with_a_reason(
    engine: Engine, clock: ManualClock, overlap: OverlapPolicy
) -> None:
    source: list[Json] = [1, 2]
    growing_source(engine, source)
    schedule = await engine.schedules.create(every(100, incremental(), overlap=overlap))
    clock.set(T0 + 100)
    (first,) = await engine.scheduler.fire_due_schedules()
    source.append(3)
    for n in (2, 3):  # the first run is still queued: each tick is skipped, and the cursor of the schedule moves on
        clock.set(T0 + 100 * n)
        assert await engine.scheduler.fire_due_schedules() == []
    skipped = [e for e in await engine.events(limit=1000) if e.type == SCHEDULE_SKIPPED]
    assert [e.data["tick"] for e in skipped] == [T0 + 200, T0 + 300]
    assert all(e.data["schedule_id"] == schedule.id for e in skipped)
    if overlap is OverlapPolicy.ALLOW:  # the stream refused the run, not the overlap policy
        assert all(first.id in str(e.data["reason"]) for e in skipped)
    assert (await engine.schedules.get(schedule.id)).next_fire_at == T0 + 400
    assert await complete_all(engine) == [1, 2]
    clock.set(T0 + 400)
    (next_run,) = await engine.scheduler.fire_due_schedules()
    assert next_run.tick == T0 + 400 and await complete_all(engine) == [3]


async def test_trigger_and_simulate_a_request_schedule(engine: Engine, clock: ManualClock) -> None:
    growing_source(engine, [1, 2, 3])
    schedule = await engine.schedules.create(every(100, incremental()))
    sim = await engine.schedules.simulate(schedule.id, count=2)
    assert [r.items for r in sim.runs] == [(2, 1), (2, 1)]  # segments of two items; nothing written
    run = await engine.schedules.trigger(schedule.id, reason="by hand")
    assert (run.trigger, run.schedule_id, run.summary.total) == (RunTrigger.MANUAL, STREAM, 2)
    with pytest.raises(IllegalState, match="incremental run"):
        await engine.schedules.trigger(schedule.id, reason="again, while the first is unfinished")
    stored = await engine.schedules.get(schedule.id)
    assert stored.spec.template == incremental()  # read back from the store as it was given
    with pytest.raises(InvalidSchedule, match="overlap"):
        await engine.schedules.update(schedule.id, overlap="queue")


async def test_a_request_that_cannot_be_planned_errs_its_tick_once(engine: Engine, clock: ManualClock) -> None:
    """A pack's task with no such pack: each tick's run is recorded as error, and the schedule moves on."""
    template = RequestTemplate(task="nopack@1.0.0:score", mode=RunMode.FULL, items=(1,))
    await engine.schedules.create(every(100, template))
    for n in (1, 2):
        clock.set(T0 + 100 * n)
        (run,) = await engine.scheduler.fire_due_schedules()
        assert (run.state, run.tick) == (RunState.ERROR, T0 + 100 * n)
        assert run.reason is not None and "nopack" in run.reason
        assert await engine.scheduler.fire_due_schedules() == []  # the tick is used up
