"""A large batch without keys, dependencies or watermarks is written as one statement per chunk, pipelined in
one transaction (``insert.insert_piped``): the same jobs and events as one statement, all or nothing."""

from __future__ import annotations

import time

import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.backends.postgres.insert import PIPE_CHUNK, pipes
from jobengine.core.ids import JobId
from jobengine.core.models import JobFilter, NewJob
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob
from jobengine.ports.watermarks import Watermark

N = 2 * PIPE_CHUNK + 100  # three chunks, the last one short


def _batch(now: float) -> list[NewJob]:
    # Every fifth job waits an hour (scheduled), every third has a priority: chunks mix states and rows
    # of both shapes (plain and with the optional columns).
    return [
        NewJob(task="t", payload={"i": i}, priority=i % 3, run_at=now + 3600 if i % 5 == 0 else None,
               timeout=30.0 if i % 7 == 0 else None)
        for i in range(N)
    ]  # fmt: skip


async def _events(store: PostgresStore) -> list[tuple[int, str, str]]:
    return [(e.id, e.type, e.job_id or "") for e in await store.list_events(0, 10 * N)]


async def test_a_large_batch_is_written_whole_in_order_with_its_events(store: PostgresStore) -> None:
    now = time.time()
    batch = _batch(now)
    phases = [("fetch", "store") if i % 4 == 0 else () for i in range(N)]
    assert pipes(batch, None)
    inserted = await store.insert_jobs(batch, now, phases)

    assert [j.id for j in inserted.jobs] == [j.id for j in batch]
    assert inserted.created == [True] * N
    stored = {j.id: j for j in await store.list_jobs(JobFilter(limit=10 * N))}
    assert len(stored) == N
    for new, job in zip(batch, inserted.jobs, strict=True):
        assert stored[job.id] == job
        assert job.payload == new.payload and job.priority == new.priority and job.timeout == new.timeout
        assert job.state is (JobState.SCHEDULED if new.run_at is not None else JobState.QUEUED)
    assert [p.name for p in stored[batch[0].id].phases] == ["fetch", "store"]
    assert stored[batch[1].id].phases == ()

    # One job.enqueued per job, ids ascending in the batch's order, as returned.
    assert await _events(store) == [(e.id, "job.enqueued", e.job_id) for e in inserted.events]
    assert [e.job_id for e in inserted.events] == [j.id for j in batch]
    ids = [e.id for e in inserted.events]
    assert ids == sorted(ids) and len(set(ids)) == N
    assert inserted.events[3].data == {"state": "queued", "attempt": 0, "priority": 0}
    assert inserted.events[0].data == {"state": "scheduled", "attempt": 0, "priority": 0}


async def test_a_bad_payload_in_the_last_chunk_writes_nothing(store: PostgresStore) -> None:
    now = time.time()
    batch = _batch(now)
    batch[-1] = NewJob(task="t", payload={"i": -1})
    object.__setattr__(batch[-1], "payload", {"x": object()})  # past NewJob's own check, as a subclass could
    with pytest.raises(InvalidJob) as err:
        await store.insert_jobs(batch, now, [()] * N)
    assert err.value.field == "payload"
    assert await store.count_jobs() == {}
    assert await _events(store) == []
    # The connection is usable afterwards: the next batch goes in.
    again = await store.insert_jobs(_batch(now), now, [()] * N)
    assert len(await store.list_jobs(JobFilter(limit=10 * N))) == len(again.jobs) == N


async def test_a_taken_id_in_a_later_chunk_writes_nothing_of_the_batch(store: PostgresStore) -> None:
    now = time.time()
    (first,) = (await store.insert_jobs([NewJob(task="t", payload=0)], now, [()])).jobs
    batch = _batch(now)
    batch[PIPE_CHUNK + 10] = NewJob(task="t", payload=1, id=first.id)
    with pytest.raises(InvalidJob) as err:
        await store.insert_jobs(batch, now, [()] * N)
    assert err.value.field == "id"
    assert [j.id for j in await store.list_jobs(JobFilter(limit=10 * N))] == [first.id]
    assert len(await _events(store)) == 1


def test_only_large_batches_without_keys_dependencies_or_watermarks_are_piped() -> None:
    now = time.time()
    batch = _batch(now)
    assert pipes(batch, None)
    assert not pipes(batch[: 2 * PIPE_CHUNK - 1], None)
    assert not pipes([*batch, NewJob(task="t", idempotency_key="k")], None)
    assert not pipes([*batch, NewJob(task="t", depends_on=(batch[0].id,))], None)
    assert not pipes(batch, {JobId(batch[0].id): [Watermark("src", "k", 1)]})
