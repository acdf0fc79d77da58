"""Jobs and their outbox rows in the store's own transaction (``insert_jobs_outboxed``): no savepoint around
the jobs, so what must hold is that an error takes both back and a repeated key adds neither."""

from __future__ import annotations

import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.ids import JobId
from jobengine.core.models import NewJob
from jobengine.errors import UnknownDependency

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
