"""Statements that join a batch with the jobs table are planned for the table they meet.

The jobs table keeps every finished job, so it only grows. A prepared statement's generic plan is costed
at the size the table had when it was made: the completion of a few jobs, prepared while the table was
small, hash-joined a seq scan of it, and every completion got slower with every job until an ANALYZE.
The store therefore never prepares these statements, and tells the planner a batch's size (the LIMIT of
``sql._rows``): a small batch probes the primary key.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.backends.postgres.db import PgTx
from jobengine.backends.sql.base import Dialect
from jobengine.backends.sql.reads import count_statement
from jobengine.core import codec
from jobengine.core.models import Completion, JobFilter, NewJob
from jobengine.core.states import JobState

from .helpers import lane_session


async def test_batch_transitions_are_never_prepared_while_the_claim_is(store: PostgresStore) -> None:
    now = time.time()
    await store.insert_jobs([NewJob(task="t", payload={"i": i}) for i in range(12)], now, [()] * 12)
    lane = await lane_session(store)
    for _ in range(12):  # psycopg prepares a statement at its 5th execution on a connection
        claimed = await store.fetch_jobs(["default"], 1, "w", 30.0, time.time())
        (job,) = claimed.jobs
        await store.complete_jobs([Completion(job.id, job.lease_token or "", None)], time.time())
        await store.next_run_at(["default"])
    assert await lane_session(store) == lane  # all of it ran on one session: the one asked below

    rows = await store._rows(b"SELECT statement FROM pg_prepared_statements", {})
    prepared = [r[0] for r in rows]
    assert any("SKIP LOCKED" in s for s in prepared), prepared  # the claim: prepared, as every other
    assert not [s for s in prepared if "'succeeded'" in s and "SKIP LOCKED" not in s]  # the completion
    assert not [s for s in prepared if "min(run_at)" in s]  # next_run_at


async def test_a_small_completion_probes_the_primary_key_of_a_larger_table(
    store: PostgresStore, postgres_dsn: str
) -> None:
    now = time.time()
    for _ in range(2):
        await store.insert_jobs([NewJob(task="t", payload={"i": i}) for i in range(1000)], now, [()] * 1000)
    claimed = await store.fetch_jobs(["default"], 3, "w", 30.0, now)
    rows = codec.dumps([[j.id, j.lease_token, None] for j in claimed.jobs], "result")
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cur = conn.cursor()
        params: dict[str, Any] = {"rows": rows, "now": now, "all": False}
        await cur.execute(b"EXPLAIN " + store._q.complete, params, prepare=False)  # as the store runs it
        plan = "\n".join(r[0] for r in await cur.fetchall())
    assert "Seq Scan on jobs" not in plan, plan
    assert "jobs_pkey" in plan, plan


async def _finish(store: PostgresStore, n: int, now: float) -> None:
    await store.insert_jobs([NewJob(task="t", payload={"i": i}) for i in range(n)], now, [()] * n)
    claimed = await store.fetch_jobs(["default"], n, "w", 30.0, now)
    await store.complete_jobs([Completion(j.id, j.lease_token or "", None) for j in claimed.jobs], now)


async def test_retention_reads_only_the_jobs_it_changes(store: PostgresStore, postgres_dsn: str) -> None:
    """A store that keeps many recently finished jobs: a retention pass with nothing old enough reads no job
    row, then one whose time has come makes them stale and later deletes them."""
    now = time.time()
    await _finish(store, 2000, now)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE jobengine.jobs")
        cur = conn.cursor()
        params = {"stale_before": now - 3600, "delete_before": now - 7200, "now": now, "limit": 10_000}
        await cur.execute(b"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + store._q.prune, params)
        plan = "\n".join(r[0] for r in await cur.fetchall())
    candidates = plan.split("CTE del")[0]  # how the pass finds its jobs; the rest changes the ones found
    assert "jobs_done_at" in candidates and "jobs_stale_at" in candidates, plan
    assert "Seq Scan" not in candidates and "jobs_pkey" not in candidates, plan
    assert (await store.prune_jobs(now - 3600, now - 7200, now, 10_000)).staled == 0

    staled = await store.prune_jobs(now + 1, now - 7200, now + 1, 10_000)
    assert (staled.staled, staled.deleted) == (2000, 0)
    deleted = await store.prune_jobs(now + 2, now + 1, now + 2, 10_000)
    assert (deleted.staled, deleted.deleted) == (0, 2000)
    assert await store.count_jobs() == {}


async def test_counting_unfinished_jobs_reads_no_finished_one(store: PostgresStore, postgres_dsn: str) -> None:
    """Each unfinished state is read from the partial index that holds it, however many finished jobs the
    store keeps."""
    now = time.time()
    await _finish(store, 3000, now)
    await store.insert_jobs([NewJob(task="t", queue="q")], now, [()])
    sql, _ = count_statement(None, finished=False)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE jobengine.jobs")
        cur = conn.cursor()
        await cur.execute(b"EXPLAIN (COSTS OFF) " + Dialect(prefix="jobengine.", native=True).q(sql).encode())
        plan = "\n".join(r[0] for r in await cur.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "jobs_runnable" in plan and "jobs_blocked" in plan, plan  # running: one of its two partial indexes
    assert await store.count_jobs(finished=False) == {("q", JobState.QUEUED): 1}


async def test_listing_dead_or_cancelled_jobs_reads_no_succeeded_one(
    store: PostgresStore, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead-letter page and a jobs list filtered on dead or cancelled read those jobs from their partial
    index, newest first, not every finished job from the newest down."""
    now = time.time()
    await store.insert_jobs([NewJob(task="t", tenant="acme")], now, [()])
    (gone,) = await store.list_jobs(JobFilter(tenant="acme"))
    await store.cancel_jobs([gone.id], "not needed", now)
    await _finish(store, 3000, now)
    seen: list[tuple[bytes, tuple[Any, ...]]] = []
    rows = PgTx.rows

    async def recorded(self: PgTx, sql: str, params: Any = ()) -> Any:
        seen.append((self._text(sql), tuple(params)))
        return await rows(self, sql, params)

    monkeypatch.setattr(PgTx, "rows", recorded)
    for states in ((JobState.CANCELLED,), (JobState.DEAD, JobState.CANCELLED)):
        assert [j.id for j in await store.list_jobs(JobFilter(tenant="acme", states=states))] == [gone.id]
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE jobengine.jobs")
        for sql, params in seen:
            cur = await conn.execute(b"EXPLAIN (COSTS OFF) " + sql, params, prepare=False)
            plan = "\n".join(r[0] for r in await cur.fetchall())
            assert "jobs_dead_cancelled" in plan and "jobs_pkey" not in plan and "Seq Scan" not in plan, plan
