"""The engine on PostgreSQL: a postgresql:// database setting opens the PostgreSQL store, and jobs run."""

from __future__ import annotations

import asyncio

import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.states import JobState
from jobengine.engine import Engine, open_store
from jobengine.errors import ConfigError
from jobengine.settings import Settings
from jobengine.worker import JobContext


def test_a_postgresql_url_opens_the_postgres_store() -> None:
    store = open_store("postgresql://app@db.example/app", Settings(postgres_schema="jobs", postgres_pool_size=3))
    assert isinstance(store, PostgresStore)
    assert store.schema == "jobs" and store.capabilities.shared and store.capabilities.cross_process_notify
    assert isinstance(open_store("postgres://app@db.example/app"), PostgresStore)
    pooled, direct = "postgresql://app@bouncer.example:6432/app", "postgresql://app@db.example/app"
    behind = open_store(pooled, Settings(database=pooled, database_direct=direct))
    assert isinstance(behind, PostgresStore)
    assert (behind.dsn, behind.direct_dsn) == (pooled, direct)
    assert store.direct_dsn == store.dsn  # no pooler: one URL for everything
    with pytest.raises(ConfigError):
        open_store("postgresql://app@db.example/app", Settings(postgres_schema="Bad-Name"))


async def test_jobs_run_end_to_end_with_phases_retries_and_dependencies(postgres_dsn: str) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=0.2))
    attempts: dict[str, int] = {}

    @engine.task(max_attempts=3)
    async def flaky(ctx: JobContext) -> str:
        attempts[ctx.job_id] = ctx.attempt
        if ctx.attempt < 2:
            raise RuntimeError("first attempt fails")
        return "ok"

    def one(ctx: JobContext) -> int:
        return 1

    def two(ctx: JobContext) -> int:
        return int(ctx.results["one"]) + 1

    engine.add_task("phased", phases=[one, two])

    async with engine:
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        try:
            first = await engine.enqueue("flaky")
            after = await engine.enqueue("phased", depends_on=[first.id])
            assert after.state is JobState.BLOCKED
            done = await engine.wait_for(after.id, timeout=60)
            assert done.state is JobState.SUCCEEDED
            assert done.result == {"one": 1, "two": 2}
            assert [p.state.value for p in done.phases] == ["succeeded", "succeeded"]
            assert (await engine.get_job(first.id)).attempt == 2
            types = [e.type for e in await engine.events(job_id=first.id)]
            assert types == ["job.enqueued", "job.started", "job.failed", "job.started", "job.succeeded"]
        finally:
            worker.stop()
            await running


async def test_the_sync_facade_and_a_worker_share_the_store_across_loops(postgres_dsn: str) -> None:
    """enqueue_sync runs on the engine's private loop in another thread; the worker on this one. Each loop
    gets its own pool and listener, and a job enqueued on one wakes the worker on the other at once."""
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))

    @engine.task()
    async def hello(ctx: JobContext) -> str:
        return f"hi {ctx.payload}"

    async with engine:
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.sleep(0.2)  # idle, waiting on the notifier
            job = await asyncio.to_thread(engine.enqueue_sync, "hello", "ada")
            done = await engine.wait_for(job.id, timeout=5)  # far below the 30 s poll interval
            assert done.result == "hi ada"
        finally:
            worker.stop()
            await running
