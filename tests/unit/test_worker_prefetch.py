"""The prefetch buffer: short jobs are claimed beyond the free slots, long ones are not, and a claimed job
that finds no slot goes back to the queue for other workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from jobengine.core.ids import JobId
from jobengine.core.models import Job
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.settings import Settings
from jobengine.worker import JobContext, Worker
from jobengine.worker.prefetch import HOLD, Prefetch
from tests.unit.test_worker import start, stop, until


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = Engine(open_store("memory"))
    async with e:
        yield e


def _job(n: int) -> Job:
    return Job(JobId(f"job_{n}"), "default", "default", "t", None, 0, 0.0, JobState.RUNNING, 1, 3, 0.0, 0.0)


def test_nothing_is_held_ahead_until_a_job_has_ended() -> None:
    buffer = Prefetch(limit=200, seconds=0.05, concurrency=10)
    assert buffer.target() == 0
    buffer.ran(0.01)  # 10 slots, 10 ms jobs: 50 starts within 50 ms
    assert buffer.target() == 50
    buffer.ran(0.0001)
    assert buffer.target() < 200  # a shorter job moves the estimate down slowly...
    for _ in range(500):
        buffer.ran(0.0001)
    assert buffer.target() == 200  # ...to the limit
    buffer.ran(1.0)  # a long job brings it to nothing at once
    assert buffer.target() == 0
    assert Prefetch(limit=0, seconds=0.05, concurrency=10).target() == 0


def test_jobs_waiting_past_the_hold_come_out_oldest_first_and_stop_claiming_ahead() -> None:
    buffer = Prefetch(limit=200, seconds=0.05, concurrency=10)
    buffer.ran(0.0001)
    buffer.put([_job(1), _job(2)], now=100.0)
    buffer.put([_job(3)], now=100.5)
    assert buffer.hold_left(100.2) == pytest.approx(HOLD - 0.2)
    assert buffer.overdue(100.0 + HOLD - 0.01) == []
    assert [j.id for j in buffer.overdue(100.0 + HOLD)] == ["job_1", "job_2"]
    assert buffer.target() == 0  # slots busy for HOLD: jobs are that long now
    assert [j.id for j in buffer.drop([JobId("job_3")])] == ["job_3"]
    assert len(buffer) == 0 and buffer.hold_left(200.0) is None


def test_dropping_lost_leases_keeps_the_rest_in_order() -> None:
    buffer = Prefetch(limit=10, seconds=0.05, concurrency=1)
    buffer.put([_job(n) for n in range(5)], now=1.0)
    buffer.drop([JobId("job_1"), JobId("job_3")])
    assert [j.id for j in buffer.drain()] == ["job_0", "job_2", "job_4"]


def _spy_on_claims(worker: Worker) -> list[int]:
    """The ``limit`` of every claim the worker makes (its source is the engine's, shared by every worker)."""
    limits: list[int] = []
    fetch = worker.source.fetch_jobs

    async def counted(queues: Sequence[str], limit: int, claimer: str, *args: Any, **kwargs: Any) -> list[Job]:
        if claimer == worker.id:
            limits.append(limit)
        return await fetch(queues, limit, claimer, *args, **kwargs)

    worker.source.fetch_jobs = counted  # type: ignore[method-assign]
    return limits


async def test_short_jobs_are_claimed_beyond_the_free_slots(engine: Engine) -> None:
    @engine.task()
    async def noop(ctx: JobContext) -> None:
        return None

    worker = engine.worker(concurrency=2, prefetch=50, poll_interval=0.05)
    limits = _spy_on_claims(worker)
    task = asyncio.create_task(worker.run())
    jobs = await engine.enqueue_many([engine.new_job("noop") for _ in range(300)])
    done = [await engine.wait_for(j.id, timeout=60) for j in jobs]
    await stop(worker, task)
    assert {j.state for j in done} == {JobState.SUCCEEDED}
    assert {j.attempt for j in done} == {1}
    assert max(limits) > 2  # claims carried more than the two free slots...
    assert max(limits) <= 2 + 50  # ...and never more than those plus the buffer's limit


async def test_long_jobs_are_not_held_from_another_worker(engine: Engine) -> None:
    ran_on: dict[str, str] = {}
    gate = asyncio.Event()

    @engine.task()
    async def long(ctx: JobContext) -> None:
        if ctx.payload.get("warm"):
            await asyncio.sleep(0.3)
        else:
            ran_on[ctx.job.id] = ctx.job.lease_worker or ""
            await gate.wait()

    first, t1 = await start(engine, concurrency=2, prefetch=50)
    limits = _spy_on_claims(first)
    warm = await engine.enqueue_many([engine.new_job("long", {"warm": True}) for _ in range(2)])
    for j in warm:
        await engine.wait_for(j.id, timeout=60)  # the worker learns that its jobs take 300 ms
    jobs = await engine.enqueue_many([engine.new_job("long", {"warm": False}) for _ in range(4)])
    await until(lambda: len(ran_on) == 2)
    await asyncio.sleep(0.3)  # time for the pump to claim ahead, if it would
    states = [(await engine.get_job(j.id)).state for j in jobs]
    assert sorted(states) == sorted([JobState.RUNNING] * 2 + [JobState.QUEUED] * 2)
    second, t2 = await start(engine, concurrency=2, prefetch=50)
    await until(lambda: len(ran_on) == 4)
    gate.set()
    for j in jobs:
        await engine.wait_for(j.id, timeout=60)
    await stop(first, t1)
    await stop(second, t2)
    assert max(limits) <= 2  # 300 ms jobs on 2 slots: none are claimed ahead
    assert sorted(ran_on.values()) == sorted([first.id] * 2 + [second.id] * 2)


def _quick_and_blocker(engine: Engine) -> asyncio.Event:
    """Registers ``quick`` (returns at once) and ``blocker`` (runs until the returned gate is set)."""
    gate = asyncio.Event()

    @engine.task()
    async def quick(ctx: JobContext) -> None:
        return None

    @engine.task()
    async def blocker(ctx: JobContext) -> None:
        await gate.wait()

    return gate


async def test_a_claimed_job_that_finds_no_slot_goes_back_for_another_worker(engine: Engine) -> None:
    gate = _quick_and_blocker(engine)
    first, t1 = await start(engine, concurrency=1, prefetch=50)
    warm = await engine.enqueue_many([engine.new_job("quick") for _ in range(20)])
    for j in warm:
        await engine.wait_for(j.id, timeout=60)  # short jobs: the worker claims ahead now
    await engine.enqueue("blocker")
    await until(lambda: first.in_flight == 1)
    shorts = await engine.enqueue_many([engine.new_job("quick") for _ in range(10)])
    # The blocker holds the only slot. Whatever the first worker claimed ahead goes back within HOLD, and
    # the second worker (no buffer) runs every short job while the blocker still runs.
    second, t2 = await start(engine, concurrency=1, prefetch=0)
    done = [await engine.wait_for(j.id, timeout=60) for j in shorts]
    assert {j.state for j in done} == {JobState.SUCCEEDED}
    assert {j.attempt for j in done} == {1}  # going back spent no attempt
    assert not gate.is_set() and first.in_flight == 1
    gate.set()
    await stop(first, t1)
    await stop(second, t2)


async def test_stopping_releases_the_buffered_jobs_without_spending_an_attempt(engine: Engine) -> None:
    _quick_and_blocker(engine)  # the blocker holds its slot until the worker stops
    worker, task = await start(engine, concurrency=1, prefetch=50, grace_period=0.1)
    warm = await engine.enqueue_many([engine.new_job("quick") for _ in range(20)])
    for j in warm:
        await engine.wait_for(j.id, timeout=60)
    blocker_job = await engine.enqueue("blocker")
    await until(lambda: worker.in_flight == 1)
    shorts = await engine.enqueue_many([engine.new_job("quick") for _ in range(10)])
    await until(lambda: worker.options.prefetch > 0 and len(worker._buffer) > 0)
    await stop(worker, task)
    states = [await engine.get_job(j.id) for j in [blocker_job, *shorts]]
    assert {(j.state, j.attempt) for j in states[1:]} <= {(JobState.QUEUED, 0)}
    assert {j.state for j in states[1:]} == {JobState.QUEUED}


def test_the_prefetch_setting_reaches_the_worker() -> None:
    assert Engine(open_store("memory")).worker().options.prefetch == Settings().worker_prefetch
    engine = Engine(open_store("memory"), settings=Settings(worker_prefetch=0))
    assert engine.worker().options.prefetch == 0
