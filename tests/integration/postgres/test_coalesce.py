"""Concurrent small enqueues without keys or dependencies share one statement (``coalesce.InsertCoalescer``):
each call still gets exactly its own jobs and events, and a call refused inside a group fails alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from jobengine.backends.postgres import PostgresStore
from jobengine.core.models import Inserted, JobFilter, NewJob
from jobengine.errors import InvalidJob


async def _concurrently(store: PostgresStore, calls: Sequence[list[NewJob]], nows: Sequence[float]) -> list[object]:
    return await asyncio.gather(
        *(store.insert_jobs(jobs, t, [()] * len(jobs)) for jobs, t in zip(calls, nows, strict=True)),
        return_exceptions=True,
    )


def _check_own(calls: Sequence[list[NewJob]], nows: Sequence[float], results: Sequence[object]) -> None:
    for jobs, t, got in zip(calls, nows, results, strict=True):
        assert isinstance(got, Inserted)
        assert [j.id for j in got.jobs] == [j.id for j in jobs] and got.created == [True] * len(jobs)
        assert [e.job_id for e in got.events] == [j.id for j in jobs]  # its own events, none of another call
        assert all(j.created_at >= t for j in got.jobs)  # never written as older than its call


async def test_concurrent_enqueues_share_a_statement(store: PostgresStore) -> None:
    now = time.time()
    calls = [[NewJob(task="t", payload={"i": i})] for i in range(40)]
    calls[20] = [NewJob(task="t", payload={"i": 20}), NewJob(task="t", payload={"i": 21}, priority=3)]
    nows = [now + i / 1000 for i in range(len(calls))]
    results = await _concurrently(store, calls, nows)
    _check_own(calls, nows, results)
    stored = await store.list_jobs(JobFilter(limit=1000))
    assert {j.id for j in stored} == {j.id for c in calls for j in c}
    # Calls written by one statement share its time: 40 calls on 5 writes at most cannot all be apart.
    created = [got.jobs[0].created_at for got in results if isinstance(got, Inserted)]
    assert len(set(created)) < len(created)


async def test_a_refused_call_in_a_group_fails_alone(store: PostgresStore) -> None:
    now = time.time()
    (taken,) = (await store.insert_jobs([NewJob(task="first")], now, [()])).jobs
    calls = [[NewJob(task="t", payload={"i": i})] for i in range(20)]
    calls[7] = [NewJob(task="t", payload={"i": 7}), NewJob(task="dup", id=taken.id)]  # refused: a taken id
    nows = [now + 1] * len(calls)
    results = await _concurrently(store, calls, nows)
    assert isinstance(results[7], InvalidJob)
    _check_own(calls[:7] + calls[8:], nows[1:], results[:7] + results[8:])
    stored = await store.list_jobs(JobFilter(limit=1000))
    assert {j.id for j in stored} == {taken.id} | {j.id for i, c in enumerate(calls) if i != 7 for j in c}


async def test_sequential_calls_each_write_their_own_jobs(store: PostgresStore) -> None:
    now = time.time()
    results = [await store.insert_jobs([NewJob(task="t", payload={"i": i})], now + i, [()]) for i in range(5)]
    # Alone, a call is written at its own time, never grouped with another.
    assert [got.jobs[0].created_at for got in results] == [now + i for i in range(5)]
    assert [[e.job_id for e in got.events] for got in results] == [[got.jobs[0].id] for got in results]


async def test_cancelled_calls_leave_the_writes_free(store: PostgresStore) -> None:
    # As many calls as the store writes at once, cancelled during their writes: each gives its write back.
    now = time.time()
    loop = asyncio.get_running_loop()
    cancelled = [loop.create_task(store.insert_jobs([NewJob(task="t")], now, [()])) for _ in range(4)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    for task in cancelled:
        task.cancel()
    await asyncio.gather(*cancelled, return_exceptions=True)
    calls = [[NewJob(task="t", payload={"i": i})] for i in range(10)]
    nows = [now + 1] * len(calls)
    async with asyncio.timeout(30):
        results = await _concurrently(store, calls, nows)
    _check_own(calls, nows, results)
