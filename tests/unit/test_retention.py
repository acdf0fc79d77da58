"""The retention service on `database: memory` with a manual clock: terminal -> stale -> deleted, never a
job that is still waiting or running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from jobengine.backends.sqlite.temporary import TemporarySqliteStore
from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, Job, Pruned
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import NotFound, StoreUnavailable
from jobengine.services import RetentionService
from jobengine.settings import Settings
from support.waiting import until

STALE_AFTER, DELETE_AFTER = 100.0, 1000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(clock: ManualClock) -> AsyncIterator[Engine]:
    settings = Settings(database="memory", stale_after=STALE_AFTER, delete_after=DELETE_AFTER, retention_interval=60)
    e = Engine(open_store("memory"), settings, clock)
    async with e:
        yield e


async def make_jobs(engine: Engine) -> dict[str, Job]:
    """One job in each interesting state: succeeded, dead, cancelled, running, queued, scheduled."""
    names = ["succeeded", "dead", "running"]
    for i, name in enumerate(names):  # claimed below in this order, highest priority first
        await engine.enqueue("work", {"name": name}, priority=10 - i)
    cancelled = await engine.enqueue("work", {"name": "cancelled"}, delay=10)
    await engine.cancel(cancelled.id)
    claimed = await engine.transitions.fetch_jobs(["default"], 3, WorkerId("w1"), 10_000.0)
    by_name = {j.payload["name"]: j for j in claimed}
    ok, bad = by_name["succeeded"], by_name["dead"]
    assert ok.lease_token is not None and bad.lease_token is not None
    await engine.transitions.complete_jobs([Completion(ok.id, ok.lease_token, "done")])
    error = AttemptError(1, engine.clock.now(), "ValueError", "broken")
    await engine.transitions.fail_jobs([Failure(bad.id, bad.lease_token, error, FailOutcome.DEAD)])
    await engine.enqueue("work", {"name": "queued"})
    await engine.enqueue("work", {"name": "scheduled"}, delay=1_000_000)
    jobs = await engine.list_jobs()
    return {j.payload["name"]: j for j in jobs}


async def states(engine: Engine) -> dict[str, JobState]:
    return {j.payload["name"]: j.state for j in await engine.list_jobs()}


async def test_terminal_jobs_become_stale_then_are_deleted(engine: Engine, clock: ManualClock) -> None:
    jobs = await make_jobs(engine)
    service = RetentionService(engine)
    types: list[str] = []  # what the bus carries to SSE, webhooks and the live view
    engine.bus.add_listener(lambda event: types.append(event.type))

    assert await service.run_once() == Pruned(0, 0, [])  # nothing is old enough yet

    clock.advance(STALE_AFTER + 1)
    pruned = await service.run_once()
    assert (pruned.staled, pruned.deleted) == (3, 0)
    after = {j.payload["name"]: j for j in await engine.list_jobs()}
    assert {n: j.state for n, j in after.items()} == {
        "succeeded": JobState.STALE,
        "dead": JobState.STALE,
        "cancelled": JobState.STALE,
        "running": JobState.RUNNING,
        "queued": JobState.QUEUED,
        "scheduled": JobState.SCHEDULED,
    }
    assert after["succeeded"].final_state is JobState.SUCCEEDED  # the outcome is kept
    assert after["dead"].final_state is JobState.DEAD

    clock.advance(DELETE_AFTER)
    pruned = await service.run_once()
    assert (pruned.staled, pruned.deleted) == (0, 3)
    assert await states(engine) == {
        "running": JobState.RUNNING,
        "queued": JobState.QUEUED,
        "scheduled": JobState.SCHEDULED,
    }
    with pytest.raises(NotFound):
        await engine.get_job(jobs["succeeded"].id)

    assert types.count("job.stale") == 3 and types.count("job.deleted") == 3
    assert service.passes == 3


async def test_waiting_and_running_jobs_are_never_touched_however_old(engine: Engine, clock: ManualClock) -> None:
    await make_jobs(engine)
    before = {n: s for n, s in (await states(engine)).items() if n in ("running", "queued", "scheduled")}
    clock.advance(100 * DELETE_AFTER)
    service = RetentionService(engine)
    await service.run_once()
    await service.run_once()
    assert await states(engine) == before


async def test_a_backlog_larger_than_a_batch_drains_in_one_pass(engine: Engine, clock: ManualClock) -> None:
    for _ in range(7):
        job = await engine.enqueue("work", delay=10)
        await engine.cancel(job.id)
    clock.advance(STALE_AFTER + 1)
    pruned = await RetentionService(engine, batch=3).run_once()
    assert pruned.staled == 7
    assert {j.state for j in await engine.list_jobs()} == {JobState.STALE}


async def test_start_and_stop_are_idempotent_and_the_loop_prunes(engine: Engine, clock: ManualClock) -> None:
    service = RetentionService(engine, interval=0.01)
    await service.stop()  # never started: nothing to do
    job = await engine.enqueue("work", delay=10)
    await engine.cancel(job.id)
    clock.advance(STALE_AFTER + 1)

    await service.start()
    await service.start()
    assert service.running
    await until(lambda: service.passes >= 1)
    assert (await engine.get_job(job.id)).state is JobState.STALE
    passes = service.passes
    await until(lambda: service.passes >= passes + 2)  # it keeps going, once per interval
    await service.stop()
    await service.stop()
    assert not service.running
    stopped_at = service.passes
    await asyncio.sleep(0.05)
    assert service.passes == stopped_at


class FlakyStore(TemporarySqliteStore):
    """A store whose first prune fails, as a database might for a moment."""

    def __init__(self) -> None:
        super().__init__()
        self.prune_calls = 0

    async def prune_jobs(self, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
        self.prune_calls += 1
        if self.prune_calls == 1:
            raise StoreUnavailable("database is locked")
        return await super().prune_jobs(stale_before, delete_before, now, limit)


async def test_a_failed_pass_is_logged_and_retried_next_interval(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    async with Engine(store, Settings(database="memory"), clock) as engine:
        service = RetentionService(engine, interval=0.01)
        await service.start()
        await until(lambda: service.passes >= 1)
        await service.stop()
    assert store.prune_calls >= 2
    assert "retention pass failed" in caplog.text


def test_the_interval_defaults_to_the_setting_and_must_be_positive() -> None:
    engine = Engine(open_store("memory"), replace(Settings(database="memory"), retention_interval=42.0))
    assert RetentionService(engine).interval == 42.0
    with pytest.raises(ValueError, match="interval"):
        RetentionService(engine, interval=0)
