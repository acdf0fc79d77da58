"""Transactional enqueue: a job written in the application's own transaction exists only if it commits."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.ids import WorkerId
from jobengine.core.models import NewJob
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import IdempotencyConflict, UnknownDependency
from jobengine.settings import Settings
from jobengine.worker import JobContext


async def _app_table(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    await conn.execute("CREATE TABLE orders (id int PRIMARY KEY, job_id text)")
    await conn.commit()


async def test_rolled_back_the_job_is_never_seen(store: PostgresStore, postgres_dsn: str) -> None:
    job = NewJob(task="ship", payload={"order": 1})
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await _app_table(conn)
        await conn.execute("INSERT INTO orders VALUES (1, %s)", (job.id,))
        inserted = await store.insert_jobs_in(conn, [job], time.time(), [()])
        assert inserted.created == [True]
        # Inside the transaction the job is there; to everyone else it is not, not even to a claim.
        assert (await store.fetch_jobs(["default"], 10, WorkerId("w"), 30, time.time())).jobs == []
        await conn.rollback()
    notifier = store.notifier()
    await notifier.started()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:  # for 2 s: nothing to get, claim, count or list
        assert await store.get_jobs([job.id]) == []
        assert (await store.fetch_jobs(["default"], 10, WorkerId("w"), 30, time.time())).jobs == []
        assert await store.count_jobs() == {}
        assert await store.list_events(0, 100) == []
        await notifier.wait(0.1)


async def test_committed_the_job_runs(postgres_dsn: str) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))
    ran = asyncio.Event()

    @engine.task()
    async def ship(ctx: JobContext) -> int:
        ran.set()
        return int(ctx.payload["order"])

    async with engine:
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.2)  # the worker is idle, listening
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            await _app_table(conn)
            async with conn.transaction():
                job = await engine.enqueue("ship", {"order": 7}, connection=conn)
                await conn.execute("INSERT INTO orders VALUES (7, %s)", (job.id,))
                await asyncio.sleep(0.3)
                assert not ran.is_set()  # not before the commit
        # The poll interval is 30 s: only the NOTIFY sent at commit can wake the worker this fast.
        await asyncio.wait_for(ran.wait(), 60.0)
        done = await engine.wait_for(job.id, timeout=5.0)
        assert done.state is JobState.SUCCEEDED and done.result == 7
        worker.stop()
        await running


async def test_an_error_leaves_the_callers_transaction_usable(store: PostgresStore, postgres_dsn: str) -> None:
    (first,) = (await store.insert_jobs([NewJob(task="t", idempotency_key="k", payload=1)], time.time(), [()])).jobs
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await _app_table(conn)
        with pytest.raises(IdempotencyConflict):
            await store.insert_jobs_in(conn, [NewJob(task="t", idempotency_key="k", payload=2)], time.time(), [()])
        with pytest.raises(UnknownDependency):
            await store.insert_jobs_in(conn, [NewJob(task="t", depends_on=("nope",))], time.time(), [()])
        same = await store.insert_jobs_in(conn, [NewJob(task="t", idempotency_key="k", payload=1)], time.time(), [()])
        assert same.created == [False] and same.jobs[0].id == first.id
        await conn.execute("INSERT INTO orders VALUES (1, 'x')")  # the transaction still works
        await conn.commit()


async def test_a_connection_is_required(store: PostgresStore) -> None:
    with pytest.raises(TypeError):
        await store.insert_jobs_in(object(), [NewJob(task="t")], time.time(), [()])


async def test_a_sync_connection_commits_and_rolls_back_with_its_transaction(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """A sync psycopg connection (SQLAlchemy's Session, Django) as the caller's: the same contract."""
    (first,) = (await store.insert_jobs([NewJob(task="t", idempotency_key="k", payload=1)], time.time(), [()])).jobs
    kept, dropped = NewJob(task="ship", payload={"order": 1}), NewJob(task="ship", payload={"order": 2})
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(IdempotencyConflict):
            await store.insert_jobs_in(conn, [NewJob(task="t", idempotency_key="k", payload=2)], time.time(), [()])
        same = await store.insert_jobs_in(conn, [NewJob(task="t", idempotency_key="k", payload=1)], time.time(), [()])
        assert same.created == [False] and same.jobs[0].id == first.id
        assert (await store.insert_jobs_in(conn, [kept], time.time(), [()])).created == [True]
        assert await store.get_jobs([kept.id]) == []  # not committed yet
        conn.commit()
        await store.insert_jobs_in(conn, [dropped], time.time(), [()])
        conn.rollback()
        assert [r[0] for r in conn.execute("SELECT id FROM orders").fetchall()] == [1]
    assert [j.id for j in await store.get_jobs([kept.id, dropped.id])] == [kept.id]
