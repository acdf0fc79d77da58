"""``Engine.wait_for`` on SQLite and PostgreSQL: waits for jobs that another engine (a bus of its own, as in
another process) finishes are woken by the store; many waits share one notifier; the safety re-read
answers when no notification comes; an unknown job and a wait that runs out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from jobengine.core.queue_config import QueueConfig, RedisConfig
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import NotFound, StoreUnavailable
from jobengine.ports.notifier import Notifier
from jobengine.settings import Settings
from jobengine.worker import JobContext


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "w.db")


@pytest.fixture
async def producer(database: str) -> AsyncIterator[Engine]:
    async with Engine.from_settings(Settings(database=database, poll_interval=60.0)) as engine:
        yield engine


@pytest.fixture
async def other(database: str, producer: Engine) -> AsyncIterator[Engine]:
    """Another engine on the same database with a worker of task ``add``: its events never reach the
    producer's bus, only the store's notification does."""
    async with Engine.from_settings(Settings(database=database, poll_interval=60.0)) as engine:

        @engine.task()
        async def add(ctx: JobContext) -> int:
            await asyncio.sleep(0.05)
            return int(ctx.payload["a"]) + 1

        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        yield engine
        worker.stop()
        await asyncio.wait_for(running, 60)


def counting(engine: Engine, make: Callable[[], Notifier] | None = None) -> list[Notifier]:
    """Record every finished-jobs notifier the engine opens (``make``: one to open instead)."""
    opened: list[Notifier] = []
    original = engine.store.finished_notifier

    def open_one() -> Notifier:
        notifier = make() if make is not None else original()
        opened.append(notifier)
        return notifier

    engine.store.finished_notifier = open_one  # type: ignore[method-assign]
    return opened


async def test_many_waits_share_one_notifier_and_end_when_another_engine_finishes(
    producer: Engine, other: Engine
) -> None:
    opened = counting(producer)
    jobs = [await producer.enqueue("add", {"a": i}) for i in range(100)]
    # A re-read only every 30 s: the store's notification is what answers within the ceiling.
    done = await asyncio.wait_for(asyncio.gather(*(producer.wait_for(j.id, 60, poll=30) for j in jobs)), 25)
    assert [(j.state, j.result) for j in done] == [(JobState.SUCCEEDED, i + 1) for i in range(100)]
    assert len(opened) == 1


class Silent:
    """A notifier that never wakes: only the safety re-read can answer a wait."""

    async def wait(self, timeout: float) -> bool:
        await asyncio.sleep(timeout)
        return False

    def notify(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_with_no_notification_the_safety_reread_answers(producer: Engine, other: Engine) -> None:
    counting(producer, Silent)
    job = await producer.enqueue("add", {"a": 1})
    done = await producer.wait_for(job.id, timeout=30, poll=0.2)
    assert (done.state, done.result) == (JobState.SUCCEEDED, 2)


async def test_an_unknown_job_is_not_found(producer: Engine) -> None:
    with pytest.raises(NotFound):
        await producer.wait_for("no-such-job", timeout=30)


async def test_a_wait_that_runs_out_raises_timeout_error(producer: Engine) -> None:
    job = await producer.enqueue("nobody-runs-this")
    with pytest.raises(TimeoutError):
        await producer.wait_for(job.id, timeout=0.3)
    assert (await producer.get_job(job.id)).state is JobState.QUEUED


async def test_closing_the_engine_ends_a_wait_with_store_unavailable(database: str) -> None:
    engine = Engine.from_settings(Settings(database=database))
    await engine.start()
    job = await engine.enqueue("nobody-runs-this")
    waiting = asyncio.create_task(engine.wait_for(job.id, timeout=60))
    await asyncio.sleep(0.3)
    await engine.close()
    with pytest.raises(StoreUnavailable, match="closed while waiting"):
        await asyncio.wait_for(waiting, 20)


async def test_jobs_delivered_by_redis_wake_their_waits_too(tmp_path: Path, redis_url: str) -> None:
    """With a broker the jobs travel through Redis, but they end in the store, which wakes the waits."""
    queue = QueueConfig(kind="redis", redis=RedisConfig(url=redis_url))
    settings = Settings(database=str(tmp_path / "b.db"), queue=queue, poll_interval=60.0)
    async with Engine.from_settings(settings) as producer, Engine.from_settings(settings) as runner:

        @runner.task()
        async def add(ctx: JobContext) -> int:
            return int(ctx.payload["a"]) + 1

        worker = runner.worker()
        running = asyncio.create_task(worker.run())
        try:
            jobs = [await producer.enqueue("add", {"a": i}) for i in range(20)]
            waits = asyncio.gather(*(producer.wait_for(j.id, 60, poll=30) for j in jobs))
            done = await asyncio.wait_for(waits, 25)
            assert [(j.state, j.result) for j in done] == [(JobState.SUCCEEDED, i + 1) for i in range(20)]
        finally:
            worker.stop()
            await asyncio.wait_for(running, 60)


async def test_a_replayed_dead_job_travels_through_redis_again(tmp_path: Path, redis_url: str) -> None:
    """Replay, like retry, tells the broker: a worker that only hears Redis runs the job again."""
    queue = QueueConfig(kind="redis", redis=RedisConfig(url=redis_url))
    settings = Settings(database=str(tmp_path / "r.db"), queue=queue, poll_interval=60.0)
    calls: list[int] = []
    async with Engine.from_settings(settings) as producer, Engine.from_settings(settings) as runner:

        @runner.task(max_attempts=1)
        async def flaky(ctx: JobContext) -> str:
            calls.append(1)
            if len(calls) == 1:
                raise KeyError("first time")
            return "ok"

        worker = runner.worker()
        running = asyncio.create_task(worker.run())
        try:
            job = await producer.enqueue("flaky", max_attempts=1)
            assert (await producer.wait_for(job.id, 60)).state is JobState.DEAD
            await producer.replay(job.id)
            done = await producer.wait_for(job.id, 60, poll=30)
            assert (done.state, done.result, len(calls)) == (JobState.SUCCEEDED, "ok", 2)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 60)
