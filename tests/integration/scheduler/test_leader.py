"""The SQLite lease leader, and the scheduler service leading, following and handing over."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from jobengine.backends.sqlite import SqliteStore
from jobengine.backends.sqlite.leader import SqliteLeader
from jobengine.core.clock import ManualClock
from jobengine.core.runs import RunFilter
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.engine import Engine
from jobengine.services import SchedulerService
from jobengine.settings import Settings

pytestmark = pytest.mark.timeout(300)


async def test_a_lease_row_elects_one_leader_and_expires(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "lead.db"))
    await store.migrate()
    clock = ManualClock(1000.0)
    a = SqliteLeader(store, "scheduler", lease_seconds=5, clock=clock)
    b = SqliteLeader(store, "scheduler", lease_seconds=5, clock=clock)
    other = SqliteLeader(store, "retention", lease_seconds=5, clock=clock)
    try:
        assert await a.try_acquire() and not await b.try_acquire()
        assert await other.try_acquire()  # another name, another leader
        clock.advance(4)
        assert await a.try_acquire()  # renewed: expires at 1009 now
        clock.advance(4)
        assert not await b.try_acquire()
        clock.advance(2)  # a stalled past its lease
        assert await b.try_acquire() and not await a.try_acquire()
        await b.release()
        assert await a.try_acquire()
    finally:
        await store.close()


async def test_a_leader_renews_its_lease_once_a_third_of_it_has_passed(tmp_path: Path) -> None:
    path = str(tmp_path / "renew.db")
    store = SqliteStore(path)
    await store.migrate()
    clock = ManualClock(1000.0)
    a = SqliteLeader(store, "scheduler", lease_seconds=6, clock=clock)
    b = SqliteLeader(store, "scheduler", lease_seconds=6, clock=clock)

    def expires_at() -> float:
        with sqlite3.connect(path) as conn:
            return float(conn.execute("SELECT expires_at FROM leader_leases WHERE name = 'scheduler'").fetchone()[0])

    try:
        assert await a.try_acquire() and expires_at() == 1006.0
        clock.advance(1.5)
        assert await a.try_acquire() and expires_at() == 1006.0  # no write: a renewal is a commit
        clock.advance(1.0)  # a third of the lease has passed
        assert await a.try_acquire() and expires_at() == 1008.5
        clock.advance(5.0)
        assert not await b.try_acquire()  # renewed in time: 1005 < 1008.5
    finally:
        await store.close()


async def _wait(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_services_in_two_processes_worth_of_engines_fire_each_tick_once(tmp_path: Path) -> None:
    settings = Settings(database=str(tmp_path / "two.db"), scheduler_lease_seconds=1.0, scheduler_poll_interval=0.2,
                        scheduler_misfire_grace=5.0)  # fmt: skip
    async with Engine.from_settings(settings) as a, Engine.from_settings(settings) as b:
        first, second = SchedulerService(a, instance="a"), SchedulerService(b, instance="b")
        await first.start()
        await second.start()
        await a.schedules.create(ScheduleSpec(name="tick", every=1, template=JobTemplate(task="t")))

        async def runs() -> int:
            return len(await a.runs.list(RunFilter(limit=1000)))

        await _wait(lambda: _at_least(runs, 3))
        assert {first.loop.leading, second.loop.leading} == {True, False}
        leader, follower = (first, second) if first.loop.leading else (second, first)
        await leader.stop()  # gives the lease up: the other takes over at its next poll
        before = await runs()
        await _wait(lambda: _at_least(runs, before + 3))
        assert follower.loop.leading
        await follower.stop()
        ticks = [r.tick for r in await a.runs.list(RunFilter(limit=1000))]
        assert len(ticks) == len(set(ticks))
        ordered = sorted(t for t in ticks if t is not None)
        assert ordered == [ordered[0] + i for i in range(len(ordered))]  # no gap
        assert {r.fired_by for r in await a.runs.list(RunFilter(limit=1000))} == {"a", "b"}


async def _at_least(count, n: int) -> bool:  # type: ignore[no-untyped-def]
    return bool(await count() >= n)


async def test_the_service_wakes_when_a_schedule_changes_in_its_process() -> None:
    settings = Settings(database="memory", scheduler_poll_interval=30.0, scheduler_misfire_grace=60.0)
    async with Engine.from_settings(settings) as engine:
        service = SchedulerService(engine)
        await service.start()
        await asyncio.sleep(0.05)  # the loop sleeps up to 30 s: only a wake-up lets it see the schedule
        await engine.schedules.create(ScheduleSpec(name="s", every=1, template=JobTemplate(task="t")))

        async def fired() -> bool:
            return bool(await engine.runs.list())

        await _wait(fired, timeout=5)
        await service.stop()
        assert not service.running
        await service.start()  # a stopped service starts again
        assert service.running
        await service.stop()
