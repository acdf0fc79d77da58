"""Jobs and their outbox rows in the store's own transaction (``insert_jobs_outboxed``): no savepoint around
the jobs, so what must hold is that an error takes both back and a repeated key adds neither."""

from __future__ import annotations

import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.ids import JobId
from jobengine.core.models import NewJob
from jobengine.errors import InvalidJob, UnknownDependency

T0 = 1_700_000_000.0


async def test_an_error_takes_back_the_jobs_and_their_outbox_rows(store: PostgresStore) -> None:
    good, bad = NewJob("t"), NewJob("t", depends_on=(JobId("no-such-job"),))
    with pytest.raises(UnknownDependency):
        await store.insert_jobs_outboxed([good, bad], T0, [(), ()], hold=30.0)
    assert await store.get_jobs([good.id, bad.id]) == []
    assert await store.outbox_due(T0 + 3600) == (False, None)
    # The store (and its pooled connection) carries on.
    out = await store.insert_jobs_outboxed([NewJob("t")], T0, [()])
    assert [r.job_id for r in out.rows] == [out.inserted.jobs[0].id]


async def test_a_repeated_key_adds_no_job_and_no_outbox_row(store: PostgresStore) -> None:
    first = await store.insert_jobs_outboxed([NewJob("t", idempotency_key="k")], T0, [()])
    again = await store.insert_jobs_outboxed([NewJob("t", idempotency_key="k")], T0, [()])
    assert again.inserted.jobs[0].id == first.inserted.jobs[0].id
    assert again.inserted.created == [False] and again.rows == []
    rows = await store.claim_outbox(T0, 10, 30.0)
    assert [r.job_id for r in rows] == [first.inserted.jobs[0].id]


async def test_one_job_and_its_outbox_row_as_a_batch_writes_them(store: PostgresStore) -> None:
    # One job without key or dependency takes one statement; a batch of two takes the transaction. Both
    # write the same rows: the job, its event, its outbox row with its headers, held when due now.
    one = NewJob("t", {"n": 1}, priority=2)
    alone = await store.insert_jobs_outboxed([one], T0, [()], headers={one.id: {"run": "r1"}}, hold=30.0)
    pair = [NewJob("t", {"n": 2}, priority=2), NewJob("t")]
    both = await store.insert_jobs_outboxed(pair, T0, [(), ()], headers={pair[0].id: {"run": "r1"}}, hold=30.0)
    (job,) = alone.inserted.jobs
    assert alone.inserted.created == [True] and [job] == await store.get_jobs([one.id])
    assert (job.payload, job.priority, job.created_at) == ({"n": 1}, 2, T0)
    (event,) = alone.inserted.events
    assert (event.type, event.job_id, event.data) == ("job.enqueued", one.id, both.inserted.events[0].data)
    (row,) = alone.rows
    assert (row.job_id, row.queue, row.available_at, row.headers) == (one.id, "default", T0, {"run": "r1"})
    assert await store.claim_outbox(T0 + 1, 10, 30.0) == []  # held for the caller's relay, as the batch's
    claimed = await store.claim_outbox(T0 + 31, 10, 30.0)
    assert [r.id for r in claimed] == [row.id] + [r.id for r in both.rows]
    assert claimed[0] == row


async def test_one_job_due_later_is_not_held(store: PostgresStore) -> None:
    later = await store.insert_jobs_outboxed([NewJob("t", run_at=T0 + 5)], T0, [()], hold=30.0)
    (row,) = later.rows
    assert later.inserted.jobs[0].state == "scheduled" and row.available_at == T0 + 5
    assert [r.id for r in await store.claim_outbox(T0 + 5, 10, 30.0)] == [row.id]


async def test_one_job_with_a_taken_id_writes_no_outbox_row(store: PostgresStore) -> None:
    (taken,) = (await store.insert_jobs_outboxed([NewJob("t")], T0, [()])).inserted.jobs
    await store.delete_outbox([r.id for r in await store.claim_outbox(T0, 10, 30.0)])
    with pytest.raises(InvalidJob):
        await store.insert_jobs_outboxed([NewJob("t", id=taken.id)], T0, [()])
    assert await store.outbox_due(T0 + 3600) == (False, None)
