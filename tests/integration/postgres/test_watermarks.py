"""Watermarks advance to the value a job carries when, and only when, that job succeeds."""

from __future__ import annotations

import time

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, Lease, NewJob
from jobengine.engine import Engine
from jobengine.errors import ConfigError, InvalidJob
from jobengine.ports.watermarks import Watermark, WatermarkStore
from jobengine.settings import Settings


async def _run(store: PostgresStore, job_id: JobId, *, succeed: bool = True, dead: bool = False) -> None:
    now = time.time()
    claimed = (await store.fetch_jobs(["default"], 100, WorkerId("w"), 30, now)).jobs
    (job,) = [j for j in claimed if j.id == job_id]
    await store.release_jobs([Lease(j.id, j.lease_token or "") for j in claimed if j.id != job_id], now)
    token = job.lease_token or ""
    if succeed:
        await store.complete_jobs([Completion(job.id, token)], now)
    else:
        error = AttemptError(job.attempt, now, "E", "boom")
        outcome = FailOutcome.DEAD if dead else FailOutcome.RETRY
        await store.fail_jobs([Failure(job.id, token, error, outcome, retry_at=now)], now)


async def _enqueue(store: PostgresStore, *marks: Watermark) -> JobId:
    job = NewJob(task="import")
    await store.insert_jobs([job], time.time(), [()], watermarks={job.id: marks})
    return job.id


async def test_a_mark_moves_only_when_its_job_succeeds_and_only_up(store: PostgresStore) -> None:
    assert isinstance(store, WatermarkStore)
    assert await store.get_watermark("orders", "eu") is None
    first = await _enqueue(store, Watermark("orders", "eu", 10))
    assert await store.get_watermark("orders", "eu") is None  # enqueued is not done
    await _run(store, first, succeed=False)  # a failed attempt moves nothing
    assert await store.get_watermark("orders", "eu") is None
    await _run(store, first)  # the retry succeeds
    assert await store.get_watermark("orders", "eu") == 10

    later, earlier = (
        await _enqueue(store, Watermark("orders", "eu", 20)),
        await _enqueue(store, Watermark("orders", "eu", 15)),
    )
    await _run(store, later)
    await _run(store, earlier)  # succeeds out of order: the mark stays at the highest
    assert await store.get_watermark("orders", "eu") == 20

    dead = await _enqueue(store, Watermark("orders", "eu", 99))
    await _run(store, dead, succeed=False, dead=True)
    assert await store.get_watermark("orders", "eu") == 20


async def test_one_job_several_marks_and_strings(store: PostgresStore) -> None:
    job = await _enqueue(store, Watermark("feed", "a", "2024-01-02"), Watermark("feed", "b", 1.5))
    await _run(store, job)
    assert await store.get_watermark("feed", "a") == "2024-01-02"
    assert await store.get_watermark("feed", "b") == 1.5
    assert await store.get_watermark("feed", "c") is None


async def test_one_batch_two_jobs_same_mark(store: PostgresStore) -> None:
    a, b = NewJob(task="t"), NewJob(task="t")
    marks = {a.id: [Watermark("s", "k", 3)], b.id: [Watermark("s", "k", 7)]}
    await store.insert_jobs([a, b], time.time(), [(), ()], watermarks=marks)
    now = time.time()
    jobs = (await store.fetch_jobs(["default"], 10, WorkerId("w"), 30, now)).jobs
    await store.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs], now)  # one statement
    assert await store.get_watermark("s", "k") == 7


def test_a_mark_validates_itself() -> None:
    with pytest.raises(InvalidJob):
        Watermark("", "k", 1)
    with pytest.raises(InvalidJob):
        Watermark("s", "k", float("nan"))
    with pytest.raises(InvalidJob):
        Watermark("s", "k", True)


async def test_through_the_engine_and_in_a_callers_transaction(postgres_dsn: str) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn))
    async with engine:
        store = engine.store
        assert isinstance(store, PostgresStore)
        job = await engine.enqueue("t", watermark=Watermark("src", "k", 5))
        await _run(store, job.id)
        assert await store.get_watermark("src", "k") == 5
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            rolled_back = await engine.enqueue("t", connection=conn, watermark=Watermark("src", "k", 50))
            await conn.rollback()
        assert await store.get_jobs([rolled_back.id]) == []


async def test_stores_without_watermarks_refuse_them() -> None:
    engine = Engine.from_settings(Settings(database="memory"))
    async with engine:
        with pytest.raises(ConfigError):
            await engine.enqueue("t", watermark=Watermark("s", "k", 1))
        with pytest.raises(ConfigError):
            await engine.enqueue("t", connection=object())
