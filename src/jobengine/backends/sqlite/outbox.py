"""The outbox and claims by id (:mod:`jobengine.ports.outbox`) on SQLite.

Mixed into :class:`SqliteStore`, so every statement runs on the store's one thread and connection, writes in
``BEGIN IMMEDIATE`` (table: migration ``0004_outbox.sql``). The claim by id is the store's own claim
statement (:func:`fenced.claim_ids`) with the batch's ids in place of the queue scan, so a job claimed here becomes
exactly what ``fetch_jobs`` makes of it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Final

from jobengine.backends.sql import outbox
from jobengine.core import codec
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed, Inserted, NewJob
from jobengine.errors import ConfigError
from jobengine.ports.outbox import Outboxed, OutboxRow
from jobengine.ports.watermarks import Watermark

from . import fenced
from .db import StoreCalls
from .inserts import insert_jobs
from .rows import insert_rows

_INSERT_OUTBOX: Final = "INSERT INTO outbox (job_id, queue, available_at, headers, held_until) VALUES "


def _insert(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    now: float,
    phases: Sequence[tuple[str, ...]],
    headers: Mapping[JobId, Mapping[str, str]],
    held_until: float,
) -> Outboxed:
    inserted = insert_jobs(conn, jobs, now, phases)
    owed = outbox.owed(inserted, headers)
    if not owed:
        return Outboxed(inserted, [])
    # Only rows due now are held (the caller's relay publishes those at once); later ones wait for any relay.
    values = [
        (j.id, j.queue, j.run_at, codec.dumps(h, "headers"), held_until if j.run_at <= now else 0.0) for j, h in owed
    ]
    last = insert_rows(conn, _INSERT_OUTBOX, 5, values)
    assert last is not None
    # The rows got consecutive ids (INTEGER PRIMARY KEY, max + 1, under this transaction's write lock).
    first = last - len(owed) + 1
    rows = [OutboxRow(first + k, j.id, j.queue, j.run_at, h) for k, (j, h) in enumerate(owed)]
    return Outboxed(inserted, rows)


class SqliteOutboxMixin:
    async def insert_jobs_outboxed(
        self: StoreCalls,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        hold: float = 0.0,
    ) -> Outboxed:
        if watermarks:
            raise ConfigError("watermark: the SQLite store does not keep watermarks")
        if not jobs:
            return Outboxed(Inserted([], [], []), [])
        held_until = now + hold if hold > 0 else 0.0
        # In a group commit: concurrent producers share one fsync instead of queueing for one each.
        return await self._write_together(lambda c: _insert(c, jobs, now, phases, headers or {}, held_until))

    async def claim_jobs(
        self: StoreCalls,
        ids: Sequence[JobId],
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
    ) -> Changed:
        if not ids or (tasks is not None and not tasks):
            return Changed()
        # As fetch_jobs: at the worker's durability, the jobs built after COMMIT (off the write lock).
        return await self._work(
            lambda c: fenced.claim_ids(c, ids, worker, lease_seconds, now, tasks),
            lambda a: fenced.claimed(a, worker, now),
        )
