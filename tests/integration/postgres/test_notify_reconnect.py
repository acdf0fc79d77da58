"""LISTEN/NOTIFY wakes idle workers across processes; the store and the notifier survive killed sessions."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.backends.postgres.insert import PIPE_CHUNK
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion, NewJob


async def _terminate_all(dsn: str) -> int:
    """pg_terminate_backend on every other session of this database (what an operator or a failover does)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        cur = await admin.execute(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def test_a_commit_elsewhere_wakes_the_waiter_at_once(store: PostgresStore, postgres_dsn: str) -> None:
    other = PostgresStore(postgres_dsn)  # another process, as far as PostgreSQL can tell
    try:
        notifier = store.notifier()
        await notifier.started()
        waiter = asyncio.create_task(notifier.wait(10.0))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await other.insert_jobs([NewJob(task="t")], time.time(), [()])
        assert await asyncio.wait_for(waiter, 5.0) is True
        assert time.monotonic() - started < 1.0
    finally:
        await other.close()


@pytest.mark.parametrize("n", [2, 2 * PIPE_CHUNK], ids=["batch", "piped batch"])
async def test_a_batch_committed_elsewhere_wakes_the_waiter(store: PostgresStore, postgres_dsn: str, n: int) -> None:
    other = PostgresStore(postgres_dsn)  # another process, as far as PostgreSQL can tell
    try:
        notifier = store.notifier()
        await notifier.started()
        await other.insert_jobs([NewJob(task="t", run_at=time.time() + 3600)], time.time(), [()])
        assert await notifier.wait(0.3) is False  # (not runnable: no notification)
        await other.insert_jobs([NewJob(task="t") for _ in range(n)], time.time(), [()] * n)
        assert await notifier.wait(5.0) is True
    finally:
        await other.close()


async def test_jobs_that_are_not_runnable_now_send_no_notification(store: PostgresStore) -> None:
    notifier = store.notifier()
    await notifier.started()
    await store.insert_jobs([NewJob(task="t", run_at=time.time() + 3600)], time.time(), [()])
    assert await notifier.wait(0.3) is False


async def test_the_notifier_listens_again_after_its_session_is_killed(store: PostgresStore, postgres_dsn: str) -> None:
    notifier = store.notifier()
    await notifier.started()
    await _terminate_all(postgres_dsn)
    # It wakes its waiters (they poll once) and reconnects.
    assert await notifier.wait(5.0) is True
    await notifier.started(timeout=10.0)
    assert notifier.reconnects >= 1
    while await notifier.wait(0.05):  # drain the wake-ups of the reconnect
        pass
    other = PostgresStore(postgres_dsn)
    try:
        waiter = asyncio.create_task(notifier.wait(10.0))
        await asyncio.sleep(0.05)
        await other.insert_jobs([NewJob(task="t")], time.time(), [()])
        assert await asyncio.wait_for(waiter, 5.0) is True
    finally:
        await other.close()


async def test_the_store_reconnects_by_itself(store: PostgresStore, postgres_dsn: str) -> None:
    now = time.time()
    await store.insert_jobs([NewJob(task="t") for _ in range(5)], now, [()] * 5)
    (job, *_) = (await store.fetch_jobs(["default"], 5, WorkerId("w"), 30, now)).jobs
    for _ in range(3):
        assert await _terminate_all(postgres_dsn) >= 1
        # Reads and fenced transitions are retried on a fresh connection: no error reaches the caller.
        assert len(await store.get_jobs([job.id])) == 1
        hb = await store.heartbeat_jobs([], now + 30, now)
        assert hb.held == frozenset()
    await _terminate_all(postgres_dsn)
    done = await store.complete_jobs([Completion(job.id, job.lease_token or "")], now)
    assert [j.id for j in done.jobs] == [job.id]
    # An insert on a session that was terminated while idle cannot have run: it is retried too.
    await _terminate_all(postgres_dsn)
    await store.insert_jobs([NewJob(task="t")], now, [()])
