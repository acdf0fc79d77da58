"""Claims on PostgreSQL: FOR UPDATE SKIP LOCKED hands every job to exactly one worker, and workers never wait
on each other's row locks."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import psycopg

from jobengine.backends.postgres import PostgresStore
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion, NewJob
from jobengine.core.states import JobState


async def _fill(store: PostgresStore, n: int, now: float) -> list[str]:
    inserted = await store.insert_jobs([NewJob(task="t", payload={"i": i}) for i in range(n)], now, [()] * n)
    return [j.id for j in inserted.jobs]


async def test_ten_jobs_three_concurrent_workers_each_job_to_exactly_one(postgres_dsn: str) -> None:
    workers = [PostgresStore(postgres_dsn, pool_max=2) for _ in range(3)]
    await workers[0].migrate()
    try:
        for _ in range(5):  # several rounds: the interleavings differ
            now = time.time()
            ids = await _fill(workers[0], 10, now)
            claimed: dict[str, list[str]] = {f"w{k}": [] for k in range(3)}

            async def work(
                k: int, store: PostgresStore, now: float = now, claimed: dict[str, list[str]] = claimed
            ) -> None:
                limit = 1 + k % 3  # workers claim 1, 2 and 3 at a time
                while True:
                    changed = await store.fetch_jobs(["default"], limit, WorkerId(f"w{k}"), 30, now)
                    if not changed.jobs:
                        return
                    claimed[f"w{k}"] += [j.id for j in changed.jobs]
                    await store.complete_jobs([Completion(j.id, j.lease_token or "") for j in changed.jobs], now)

            await asyncio.gather(*(work(k, s) for k, s in enumerate(workers)))
            everyone = Counter(i for got in claimed.values() for i in got)
            assert set(everyone) == set(ids)
            assert max(everyone.values()) == 1, f"a job went to two workers: {everyone.most_common(3)}"
    finally:
        for s in workers:
            await s.close()


async def test_five_greedy_workers_never_wait_on_each_others_row_locks(postgres_dsn: str) -> None:
    workers = [PostgresStore(postgres_dsn, pool_max=2) for _ in range(5)]
    await workers[0].migrate()
    n = 3000
    await _fill(workers[0], n, time.time())
    waits: list[tuple[object, ...]] = []
    done = asyncio.Event()

    async def watch_locks() -> int:
        """Sample pg_locks for row locks a session of this database waits for: a wait on a row shows as
        a wait on the transaction that holds it (or on the tuple). Relation-extension locks, taken for
        a moment while a table grows, are not row locks."""
        samples = 0
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            while not done.is_set():
                cur = await conn.execute(
                    """SELECT l.locktype, l.mode, l.pid, left(a.query, 60), pg_blocking_pids(l.pid)
                       FROM pg_locks l
                       JOIN pg_stat_activity a ON a.pid = l.pid
                       WHERE NOT l.granted AND a.datname = current_database()
                         AND l.locktype IN ('transactionid', 'tuple')"""
                )
                waits.extend(await cur.fetchall())
                samples += 1
                await asyncio.sleep(0.001)
        return samples

    claimed: Counter[str] = Counter()

    async def work(k: int, store: PostgresStore) -> None:
        while True:
            now = time.time()
            changed = await store.fetch_jobs(["default"], 25, WorkerId(f"w{k}"), 30, now)
            if not changed.jobs:
                return
            claimed.update(j.id for j in changed.jobs)
            await store.complete_jobs([Completion(j.id, j.lease_token or "") for j in changed.jobs], now)

    watcher = asyncio.create_task(watch_locks())
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(work(k, s) for k, s in enumerate(workers)))
    finally:
        done.set()
        samples = await watcher
    try:
        assert samples > 10
        assert waits == [], f"workers waited on locks: {waits[:5]}"
        assert len(claimed) == n and max(claimed.values()) == 1
        counts = await workers[0].count_jobs()
        assert counts == {("default", JobState.SUCCEEDED): n}
    finally:
        for s in workers:
            await s.close()


async def test_a_locked_job_is_invisible_to_other_workers(store: PostgresStore, postgres_dsn: str) -> None:
    now = time.time()
    ids = await _fill(store, 3, now)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as other:
        # Another worker's claim, still in its transaction: the row is locked.
        await other.execute("SELECT id FROM jobengine.jobs WHERE id = %s FOR UPDATE", (ids[0],))
        async with asyncio.timeout(2):  # SKIP LOCKED: no waiting for the other transaction
            changed = await store.fetch_jobs(["default"], 10, WorkerId("me"), 30, now)
        assert sorted(j.id for j in changed.jobs) == sorted(ids[1:])
        await other.rollback()
    changed = await store.fetch_jobs(["default"], 10, WorkerId("me"), 30, now)
    assert [j.id for j in changed.jobs] == [ids[0]]


async def test_a_completed_job_is_gone_from_the_queue(store: PostgresStore, postgres_dsn: str) -> None:
    now = time.time()
    (job_id,) = await _fill(store, 1, now)
    (job,) = (await store.fetch_jobs(["default"], 10, WorkerId("me"), 1, now)).jobs
    assert job.id == job_id
    await store.complete_jobs([Completion(job.id, job.lease_token or "", "ok")], now)
    later = now + 3600  # long after the lease would have expired
    assert (await store.fetch_jobs(["default"], 10, WorkerId("me"), 1, later)).jobs == []
    assert await store.expired_jobs(later, 10) == []
    assert await store.next_run_at(["default"]) is None
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM jobengine.jobs WHERE state IN ('queued', 'scheduled', 'failed', 'running')"
        )
        assert await cur.fetchone() == (0,)


async def test_the_claim_reads_the_partial_runnable_index(store: PostgresStore, postgres_dsn: str) -> None:
    now = time.time()
    await _fill(store, 2000, now)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE jobengine.jobs")
        params = {
            "queue": "default",
            "limit": 10,
            "worker": "w",
            "expires": now + 30,
            "now": now,
            "tasks": ["t"],
            "tenant": None,
        }
        cur = await conn.execute(b"EXPLAIN " + store._q.claim_one, params)
        plan = "\n".join(r[0] for r in await cur.fetchall())
    assert "jobs_runnable" in plan, plan
    assert "LockRows" in plan, plan
