"""A producer on PostgreSQL while every other session of its database is terminated again and again.

Every enqueue returns (single and batch, with and without idempotency keys), each returned job exists
exactly once, no key gets two jobs, and the store's sessions stay within its pool's bounds. An insert
whose connection dies after its commit, before its answer is read, is retried without writing the job
twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.backends.postgres import store as store_module
from jobengine.core.models import Inserted, NewJob
from jobengine.engine import Engine

APP = "jobengine_producer"
POOL_MAX = 4
PRODUCERS = 3
CALLS = 400  # per producer: four kinds of call in turn


async def _sessions(admin: psycopg.AsyncConnection[Any]) -> int:
    cur = await admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s", (APP,)
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _terminate(admin: psycopg.AsyncConnection[Any]) -> int:
    cur = await admin.execute(
        """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()"""
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_enqueue_survives_terminated_sessions_without_duplicates_or_leaked_sessions(postgres_dsn: str) -> None:
    store = PostgresStore(f"{postgres_dsn}?application_name={APP}", pool_max=POOL_MAX)
    await store.migrate()
    engine = Engine(store)
    returned: list[str] = []
    keys: dict[str, str] = {}  # idempotency key -> the id the call returned
    failures: list[BaseException] = []
    done = asyncio.Event()

    async def producer(n: int) -> None:
        for i in range(CALLS):
            try:
                kind = i % 4
                if kind == 0:
                    returned.append((await engine.enqueue("t", {"p": n, "i": i})).id)
                elif kind == 1:
                    key = f"k-{n}-{i}"
                    keys[key] = (await engine.enqueue("t", {"p": n, "i": i}, idempotency_key=key)).id
                elif kind == 2:
                    batch = [engine.new_job("t", {"p": n, "i": i, "j": j}) for j in range(5)]
                    returned.extend(job.id for job in await engine.enqueue_many(batch))
                else:
                    batch = [engine.new_job("t", {"p": n, "i": i, "j": j}, idempotency_key=f"k-{n}-{i}-{j}")
                             for j in range(5)]  # fmt: skip
                    for j, job in enumerate(await engine.enqueue_many(batch)):
                        keys[f"k-{n}-{i}-{j}"] = job.id
            except Exception as exc:  # every call must return: collected, asserted below
                failures.append(exc)
            await asyncio.sleep(random.uniform(0, 0.01))

    async def chaos() -> tuple[int, int, int]:
        terminated, rounds, most = 0, 0, 0
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            next_kill = time.monotonic() + random.uniform(0.3, 1.0)
            while not done.is_set():
                most = max(most, await _sessions(admin))
                for pool in list(store._pools.values()):
                    stats = pool.get_stats()
                    assert stats["pool_size"] <= POOL_MAX, stats
                if time.monotonic() >= next_kill:
                    terminated += await _terminate(admin)
                    rounds += 1
                    next_kill = time.monotonic() + random.uniform(0.3, 1.0)
                await asyncio.sleep(0.05)
        return terminated, rounds, most

    killer = asyncio.create_task(chaos())
    try:
        await asyncio.wait_for(asyncio.gather(*(producer(n) for n in range(PRODUCERS))), 40)
    finally:
        done.set()
        terminated, rounds, most = await killer
    try:
        assert not failures, f"{len(failures)} enqueue calls failed, first: {failures[0]!r}"
        assert rounds >= 3 and terminated > 0, "the chaos never terminated a session"
        # The pool's sessions, the lane and the notifier's, never more.
        assert most <= POOL_MAX + 2, f"{most} sessions of the store at once"
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            cur = await admin.execute("SELECT id, idempotency_key FROM jobengine.jobs")
            rows = await cur.fetchall()
        ids = [r[0] for r in rows]
        assert len(ids) == len(set(ids))
        expected = set(returned) | set(keys.values())
        assert len(returned) == len(set(returned)) == PRODUCERS * (CALLS // 4) * 6
        assert set(ids) == expected  # every returned job exists, and nothing else was written
        stored_keys = {r[1]: r[0] for r in rows if r[1] is not None}
        assert stored_keys == keys  # one job per key: the one its call returned
    finally:
        await engine.close()
        await store.close()


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("size", [1, 5])
async def test_an_insert_whose_answer_is_lost_after_its_commit_is_not_written_twice(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, size: int, keyed: bool
) -> None:
    store = PostgresStore(postgres_dsn, pool_max=POOL_MAX)
    await store.migrate()
    killed: list[int] = []

    def losing(real: Callable[..., Awaitable[Inserted | None]]) -> Callable[..., Awaitable[Inserted | None]]:
        """The real insert, then its session is terminated before the store reads anything more: the
        commit happened, the caller's connection dies, as when the answer is lost on the way back."""

        async def insert(conn: psycopg.AsyncConnection[Any], *args: Any) -> Inserted | None:
            out = await real(conn, *args)
            if not killed:
                killed.append(conn.info.backend_pid)
                async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
                    await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                await conn.execute("SELECT 1")  # the dead session answers with an error
            return out

        return insert

    monkeypatch.setattr(store_module, "insert_fast", losing(store_module.insert_fast))
    monkeypatch.setattr(store_module, "insert_general", losing(store_module.insert_general))
    try:
        now = time.time()
        jobs = [NewJob("t", {"j": j}, idempotency_key=f"key-{j}" if keyed else None) for j in range(size)]
        inserted = await store.insert_jobs(jobs, now, [()] * size)
        assert killed, "the insert's session was never terminated"
        assert [j.id for j in inserted.jobs] == [j.id for j in jobs]
        assert inserted.created == [True] * size
        assert sorted(e.job_id for e in inserted.events if e.type == "job.enqueued") == sorted(j.id for j in jobs)
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            cur = await admin.execute("SELECT count(*), count(DISTINCT id) FROM jobengine.jobs")
            assert await cur.fetchone() == (size, size)
            cur = await admin.execute("SELECT count(*) FROM jobengine.events WHERE type = 'job.enqueued'")
            assert await cur.fetchone() == (size,)
    finally:
        await store.close()
