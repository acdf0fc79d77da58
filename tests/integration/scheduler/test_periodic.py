"""Schedules declared in code, synced with a real store (SQLite, PostgreSQL): created when missing, left
alone when equal, updated once when the declaration changed, whatever the number of replicas starting
together; paused stays paused; a schedule no longer declared is left as it is and logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.models import Event
from jobengine.core.schedules import JobTemplate, ScheduleFilter, ScheduleSpec
from jobengine.engine import Engine
from jobengine.services import SchedulerService

pytestmark = pytest.mark.timeout(300)


def declaring(cron: str, *, name: str = "report") -> Callable[[Engine], None]:
    """What an app module does at import: a task and a schedule of it."""

    def declare(engine: Engine) -> None:
        @engine.periodic(cron, tz="Europe/Paris", name=name, kwargs={"kind": "full"})
        @engine.task(queue="reports")
        async def send_report(kind: str = "short") -> str:
            return kind

    return declare


@asynccontextmanager
async def replicas(
    engine: Engine, clock: ManualClock, app: Callable[[Engine], None], count: int = 1
) -> AsyncIterator[list[Engine]]:
    """``count`` engines on ``engine``'s database (processes of one app), each with ``app`` declared."""
    async with AsyncExitStack() as stack:
        started = []
        for _ in range(count):
            replica = Engine.from_settings(engine.settings, clock)
            app(replica)
            started.append(await stack.enter_async_context(replica))
        yield started


async def audit(engine: Engine) -> list[Event]:
    return [e for e in await engine.events(limit=10_000) if e.type.startswith("schedule.")]


async def test_created_when_missing_left_alone_when_equal_updated_once_when_changed(
    engine: Engine, clock: ManualClock
) -> None:
    async with replicas(engine, clock, declaring("0 8 * * *")) as (first,):
        ((created, outcome),) = await first.periodic.sync()
    assert (outcome, created.version, created.created_by, created.spec.cron) == ("created", 1, "code", "0 8 * * *")
    assert created.spec.template.payload == {"kind": "full"} and created.spec.timezone == "Europe/Paris"
    clock.advance(60)
    async with replicas(engine, clock, declaring("0 8 * * *")) as (again,):
        ((same, outcome),) = await again.periodic.sync()
    assert (outcome, same.version, same.updated_at) == ("unchanged", 1, created.updated_at)
    assert [(e.type, e.data["actor"]) for e in await audit(engine)] == [("schedule.created", "code")]
    clock.advance(60)
    async with replicas(engine, clock, declaring("30 9 * * *")) as (changed,):
        ((updated, outcome),) = await changed.periodic.sync()
    assert (outcome, updated.id, updated.version, updated.updated_by) == ("updated", created.id, 2, "code")
    stored = await engine.schedules.get("report")
    assert (stored.version, stored.spec.cron, stored.cursor) == (2, "30 9 * * *", clock.now())
    events = await audit(engine)
    assert [(e.type, e.data["actor"]) for e in events] == [("schedule.created", "code"), ("schedule.updated", "code")]
    assert events[1].data["changes"] == ["cron"]


async def test_replicas_starting_together_create_once_and_update_once(engine: Engine, clock: ManualClock) -> None:
    async with replicas(engine, clock, declaring("0 8 * * *"), count=3) as fleet:
        outcomes = await asyncio.gather(*(e.periodic.sync() for e in fleet))
    assert sorted(o for ((_, o),) in outcomes) == ["created", "unchanged", "unchanged"]
    async with replicas(engine, clock, declaring("0 8 * * *"), count=3) as fleet:
        outcomes = await asyncio.gather(*(e.periodic.sync() for e in fleet))
    assert sorted(o for ((_, o),) in outcomes) == ["unchanged"] * 3
    async with replicas(engine, clock, declaring("*/10 * * * *"), count=3) as fleet:
        outcomes = await asyncio.gather(*(e.periodic.sync() for e in fleet))
    assert sorted(o for ((_, o),) in outcomes) == ["unchanged", "unchanged", "updated"]
    assert {s.version for ((s, _),) in outcomes} == {2}
    (stored,) = await engine.schedules.list(ScheduleFilter())
    assert (stored.version, stored.spec.cron) == (2, "*/10 * * * *")
    assert [e.type for e in await audit(engine)] == ["schedule.created", "schedule.updated"]


async def test_a_paused_declared_schedule_stays_paused_and_a_change_by_hand_is_put_back(
    engine: Engine, clock: ManualClock
) -> None:
    async with replicas(engine, clock, declaring("0 8 * * *")) as (app,):
        await app.periodic.sync()
        await app.schedules.pause("report", actor="ops")
        await app.schedules.update("report", cron="0 7 * * *", actor="ops")
        ((schedule, outcome),) = await app.periodic.sync()
    assert outcome == "updated"  # the code says 8 o'clock: the code wins, once
    assert (schedule.spec.cron, schedule.enabled, schedule.next_fire_at, schedule.version) == (
        "0 8 * * *",
        False,
        None,
        4,
    )
    async with replicas(engine, clock, declaring("0 8 * * *")) as (app,):
        ((schedule, outcome),) = await app.periodic.sync()
    assert (outcome, schedule.enabled) == ("unchanged", False)


async def test_a_schedule_no_longer_declared_is_left_as_it_is_and_logged(
    engine: Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with replicas(engine, clock, declaring("0 8 * * *", name="old-report")) as (app,):
        await app.periodic.sync()
    by_hand = ScheduleSpec(name="by-hand", every=60, template=JobTemplate(task="send_report"))
    await engine.schedules.create(by_hand, actor="ops")
    with caplog.at_level(logging.INFO, logger="jobengine.scheduler"):
        async with replicas(engine, clock, declaring("0 8 * * *", name="new-report")) as (app,):
            await app.periodic.sync()
    names = sorted(s.name for s in await engine.schedules.list(ScheduleFilter()))
    assert names == ["by-hand", "new-report", "old-report"]
    left = [r.getMessage() for r in caplog.records if "no longer is" in r.getMessage()]
    assert left == [
        "schedule old-report was declared in code and no longer is; left as it is "
        "(`jobengine schedules delete old-report` removes it)"
    ]


async def test_a_scheduler_and_a_worker_sync_as_they_start(engine: Engine, clock: ManualClock) -> None:
    async with replicas(engine, clock, declaring("0 8 * * *", name="by-scheduler")) as (app,):
        service = SchedulerService(app, instance="test")
        await service.start()
        try:
            assert (await engine.schedules.get("by-scheduler")).created_by == "code"
        finally:
            await service.stop()
    app = Engine.from_settings(engine.settings, clock)
    declaring("0 8 * * *", name="by-worker")(app)
    async with app:
        running = asyncio.create_task(app.run_worker(poll_interval=0.05))
        deadline = asyncio.get_running_loop().time() + 60
        try:
            while not [s for s in await engine.schedules.list(ScheduleFilter()) if s.name == "by-worker"]:
                assert asyncio.get_running_loop().time() < deadline, "the worker did not declare its schedule"
                await asyncio.sleep(0.05)
        finally:
            await app.close()  # stops the worker
            async with asyncio.timeout(60):
                await running


async def test_a_close_that_lands_while_the_worker_syncs_its_schedules_stops_it(
    engine: Engine, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Engine.from_settings(engine.settings, clock)
    declaring("0 8 * * *")(app)
    sync = app.periodic.sync

    async def sync_then_close() -> object:
        synced = await sync()
        await app.close()  # a shutdown between the sync and the worker's start
        return synced

    monkeypatch.setattr(app.periodic, "sync", sync_then_close)
    async with app:
        async with asyncio.timeout(60):
            await app.run_worker(poll_interval=0.05)
