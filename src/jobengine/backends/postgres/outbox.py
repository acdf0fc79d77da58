"""The outbox and claims by id (:mod:`jobengine.ports.outbox`) on PostgreSQL (table: ``0004_outbox.sql``).

Mixed into :class:`PostgresStore`; statements go through its pool, retry and error translation (``_run``).
Jobs and their outbox rows are written in one transaction: the store's own insert (``insert_jobs_in``, in a
savepoint, in a caller's transaction; ``insert_jobs_own``, without one, in the store's) followed by one
INSERT of the rows. One job without key, dependency or watermark, outside a caller's transaction, is one
statement instead (``sql.INSERT_ONE_OUTBOXED``, committed alone: one round trip, not four). The claim by
id is the store's claim (``sql.CLAIM_IDS``: the row is deleted and inserted again as running) over the
delivered ids, ``FOR UPDATE SKIP LOCKED``, so two workers handed the same message never both start the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, cast

from psycopg.rows import tuple_row

from jobengine.backends.postgres import sql
from jobengine.backends.postgres.caller import caller_connection
from jobengine.backends.postgres.changes import Collect
from jobengine.backends.postgres.insert import InsertPlan, insert_one_outboxed, recover, writes_one
from jobengine.backends.postgres.mixin import Conn, StoreCalls, qualify
from jobengine.backends.sql import outbox
from jobengine.core import codec
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed, Inserted, NewJob
from jobengine.ports.outbox import Outboxed, OutboxRow
from jobengine.ports.watermarks import Watermark

_INSERT = """INSERT INTO {s}outbox (job_id, queue, available_at, headers, held_until)
SELECT e->>0, e->>1, (e->>2)::float8, e->3,
    CASE WHEN (e->>2)::float8 <= %(now)s::float8 THEN %(held_until)s::float8 ELSE 0 END
FROM jsonb_array_elements(%(rows)s::jsonb) AS x(e)
RETURNING id, job_id"""

_OUTBOX_OF = """SELECT id, job_id, queue, available_at, headers::text FROM {s}outbox
WHERE job_id = ANY(%(ids)s::text[]) ORDER BY id"""


class _Runs(StoreCalls, Protocol):
    async def insert_jobs_in(
        self,
        connection: object,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted: ...

    async def insert_jobs_own(
        self,
        conn: Conn,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted: ...


async def _insert_outboxed(
    store: _Runs,
    connection: object,
    jobs: Sequence[NewJob],
    now: float,
    phases: Sequence[tuple[str, ...]],
    headers: Mapping[JobId, Mapping[str, str]] | None,
    watermarks: Mapping[JobId, Sequence[Watermark]] | None,
    hold: float,
    *,
    own: bool = False,
) -> Outboxed:
    if own:
        inserted = await store.insert_jobs_own(cast(Conn, connection), jobs, now, phases, watermarks=watermarks)
    else:
        inserted = await store.insert_jobs_in(connection, jobs, now, phases, watermarks=watermarks)
    owed = outbox.owed(inserted, headers or {})
    if not owed:
        return Outboxed(inserted, [])
    # Only rows due now are held (the caller's relay publishes those at once); later ones wait for any relay.
    values = codec.dumps([[j.id, j.queue, j.run_at, h] for j, h in owed], "headers")
    params = {"rows": values, "now": now, "held_until": now + hold if hold > 0 else 0.0}
    # Tuples whatever row factory a caller's connection has (SQLAlchemy's, Django's).
    cur = caller_connection(connection).cursor(row_factory=tuple_row)
    await cur.execute(qualify(store, _INSERT), params)
    ids = {r[1]: int(r[0]) for r in await cur.fetchall()}
    rows = [OutboxRow(ids[j.id], j.id, j.queue, j.run_at, h) for j, h in owed]
    return Outboxed(inserted, rows)


class PostgresOutboxMixin:
    async def insert_jobs_outboxed(
        self: _Runs,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        hold: float = 0.0,
    ) -> Outboxed:
        if not jobs:
            return Outboxed(Inserted([], [], []), [])

        # One job without key, dependency or watermark: one statement that commits alone, no transaction.
        one = InsertPlan.of(jobs, now, phases, None) if writes_one(jobs, watermarks) else None
        held_until = now + hold if hold > 0 else 0.0
        tries = 0

        async def op(conn: Conn) -> Outboxed:
            nonlocal tries
            tries += 1
            if tries > 1 and (done := await recover(conn, self._q, jobs, now)) is not None:
                # The try whose answer was lost had committed: its outbox rows are read back.
                ids = [j.id for j, created in zip(done.jobs, done.created, strict=True) if created]
                cur = await conn.execute(qualify(self, _OUTBOX_OF), {"ids": ids})
                rows = await cur.fetchall()
                return Outboxed(done, [outbox.outbox_row(r) for r in rows])
            if one is not None:
                job = one.jobs[0]
                mine = (headers or {}).get(job.id, {})
                done, outbox_id = await insert_one_outboxed(conn, self._q, one, mine, held_until)
                written = done.jobs[0]
                return Outboxed(done, [OutboxRow(outbox_id, written.id, written.queue, written.run_at, dict(mine))])
            async with conn.transaction():
                return await _insert_outboxed(self, conn, jobs, now, phases, headers, watermarks, hold, own=True)

        # Retried like insert_jobs: a retry first looks for the batch by its ids.
        return await self._run(op)

    async def insert_jobs_outboxed_in(
        self: _Runs,
        connection: object,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Outboxed:
        return await _insert_outboxed(self, connection, jobs, now, phases, headers, watermarks, 0.0)

    async def claim_jobs(
        self: _Runs,
        ids: Sequence[JobId],
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
    ) -> Changed:
        if not ids or (tasks is not None and not tasks):
            return Changed()
        params = {
            "ids": list(dict.fromkeys(ids)), "worker": worker, "expires": now + lease_seconds, "now": now,
            "tasks": list(tasks) if tasks is not None else None,
        }  # fmt: skip
        out = Collect(now)
        out.add(await self._rows(qualify(self, sql.CLAIM_IDS), params))
        return out.changed()
