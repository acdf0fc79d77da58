"""A worker's liveness on PostgreSQL survives its session being terminated: it takes its lock again at once,
and no other process declares it dead meanwhile (its running job is never rescued while it runs)."""

from __future__ import annotations

import asyncio

import psycopg

from jobengine.backends.postgres import PostgresStore
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext


async def _terminate_all(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        cur = await admin.execute(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def test_a_terminated_session_is_not_a_dead_worker(store: PostgresStore, postgres_dsn: str) -> None:
    settings = Settings(database=postgres_dsn, lease_seconds=60.0)
    worker_side, rescuer_side = Engine(store, settings), Engine(PostgresStore(postgres_dsn, pool_max=2), settings)
    release = asyncio.Event()

    @worker_side.task()
    async def long(ctx: JobContext) -> str:
        await release.wait()
        return "done"

    async with worker_side, rescuer_side:
        worker = worker_side.worker(poll_interval=0.05, liveness_interval=3600)
        running = asyncio.create_task(worker.run())
        job = await worker_side.enqueue("long")
        async with asyncio.timeout(30):
            while (await worker_side.get_job(job.id)).state is not JobState.RUNNING:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        for _ in range(3):  # the storm: every session goes, the worker's liveness session with them
            assert await _terminate_all(postgres_dsn) >= 1
            for _ in range(25):  # 2.5 s of looks by another process, past its 1 s grace every time
                rescued = await rescuer_side.transitions.rescue_dead_workers()
                assert rescued.jobs == [], "a live worker's job was rescued after its session was terminated"
                await asyncio.sleep(0.1)
        assert {w.id for w in await rescuer_side.fleet.live()} == {worker.id}
        release.set()
        done = await worker_side.wait_for(job.id, timeout=30)
        assert (done.state, done.attempt, done.errors) == (JobState.SUCCEEDED, 1, ())
        worker.stop()
        await asyncio.wait_for(running, 30)
