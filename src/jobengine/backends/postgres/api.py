"""The event log's bounds and settled reads and the dead-letter purge on PostgreSQL (their SQL is this
backend's own: one statement each). Mixed into :class:`PostgresStore`; the rest of the HTTP layer's ports
are :mod:`jobengine.backends.sql`."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.backends.postgres.mixin import StoreCalls, qualify
from jobengine.core.ids import JobId
from jobengine.core.models import Event

# As retention deletes (sql.PRUNE): the row, its outgoing edges and watermarks; edges to it stay.
_PURGE_DEAD = """WITH cand AS (
    SELECT j.id FROM {s}jobs j
    WHERE j.state = 'dead' AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
      AND (%(ids)s::text[] IS NULL OR j.id = ANY(%(ids)s::text[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    ORDER BY j.id LIMIT %(limit)s::int4
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM {s}jobs j USING cand WHERE j.id = cand.id AND j.state = 'dead'
    RETURNING j.id, j.tenant, j.queue, j.task, j.attempt
), deps AS (
    DELETE FROM {s}job_dependencies d USING del WHERE d.job_id = del.id
), marks AS (
    DELETE FROM {s}job_watermarks m USING del WHERE m.job_id = del.id
), ev AS (
    INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data)
    SELECT %(now)s::float8, 'job.deleted', tenant, id, queue, task,
           jsonb_build_object('state', 'dead', 'attempt', attempt) FROM del ORDER BY id
    RETURNING id, at, type, tenant, job_id, queue, task, data::text
)
SELECT * FROM ev ORDER BY id"""


# How far past a follower's cursor the gap check looks (ids, through the primary key): more than one read
# of the feed takes, so the read never passes the checked range.
_SETTLE_SCAN = 5000
# The last id before the first hole in the sequence that a young row follows: the hole may be an open
# transaction's id (or several).
_SETTLED = """WITH tail AS (
    SELECT id, at FROM {s}events WHERE id > %(after)s::int8 ORDER BY id LIMIT %(scan)s::int4
), steps AS (
    SELECT id, at, lag(id) OVER (ORDER BY id) AS prev FROM tail
)
SELECT (SELECT coalesce(prev, %(after)s::int8) FROM steps
        WHERE id <> coalesce(prev, %(after)s::int8) + 1 AND at > %(young)s::float8 ORDER BY id LIMIT 1),
       (SELECT max(id) FROM {s}events)"""


class PostgresApiMixin:
    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: StoreCalls) -> tuple[int, int]:
        rows = await self._rows(qualify(self, "SELECT min(id), max(id) FROM {s}events"), {})
        return int(rows[0][0] or 0), int(rows[0][1] or 0)

    async def settled_event_id(self: StoreCalls, after_id: int, now: float, grace: float) -> tuple[int, int]:
        rows = await self._rows(
            qualify(self, _SETTLED),
            {"after": after_id, "young": now - grace, "scan": _SETTLE_SCAN},
        )
        before_hole, newest = rows[0]
        newest = max(after_id, int(newest or 0))
        if before_hole is not None:
            return int(before_hole), newest
        return min(newest, after_id + _SETTLE_SCAN), newest  # past the scan: not checked yet

    # -- DeadLetterStore ----------------------------------------------------------------------------
    async def purge_dead_jobs(
        self: StoreCalls,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        from jobengine.backends.postgres.rows import event_from_row

        params = {"now": now, "limit": max(0, limit), "tenant": tenant, "queue": queue,
                  "ids": list(ids) if ids is not None else None}  # fmt: skip
        return [event_from_row(r) for r in await self._rows(qualify(self, _PURGE_DEAD), params)]
