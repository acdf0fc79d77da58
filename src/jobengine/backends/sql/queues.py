"""Queue settings and flow limits (tables: migrations ``0003_api``, ``0007_flow``), the queues' counts, the
dead-letter purge and the event log's pruning: the ``QueueSettingsStore`` port, the limits and counts of the
``FlowStore`` port, ``purge_dead_jobs`` and ``prune_events``, mixed into both SQL stores."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core.flow.limits import FlowLimits
from jobengine.core.ids import JobId
from jobengine.core.models import Event
from jobengine.ports.flow import FlowCounts
from jobengine.ports.queues import QueueSettings

from .base import HasDb, Tx, conditions


class SqlQueuesMixin:
    async def list_queue_settings(self: HasDb) -> list[QueueSettings]:
        sql = "SELECT queue, paused, concurrency, updated_at FROM {s}queue_settings ORDER BY queue"
        rows = await self.db.read(lambda tx: tx.rows(sql))
        return [QueueSettings(r[0], bool(r[1]), r[2], r[3]) for r in rows]

    async def set_queue_settings(self: HasDb, settings: QueueSettings) -> QueueSettings:
        sql = ("INSERT INTO {s}queue_settings (queue, paused, concurrency, updated_at) VALUES (?, ?, ?, ?) "
               "ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, concurrency = EXCLUDED.concurrency, "
               "updated_at = EXCLUDED.updated_at")  # fmt: skip
        args = (settings.queue, bool(settings.paused), settings.concurrency, settings.updated_at)
        await self.db.write(lambda tx: tx.run(sql, args))
        return settings

    async def prune_events(self: HasDb, before: float, limit: int) -> int:
        # Ids grow with time, so the oldest by id are the oldest by time.
        sql = "DELETE FROM {s}events WHERE id IN (SELECT id FROM {s}events WHERE at < ? ORDER BY id LIMIT ?)"
        return await self.db.write(lambda tx: tx.run(sql, (before, limit)))

    async def list_flow_limits(self: HasDb) -> list[FlowLimits]:
        rows = await self.db.read(
            lambda tx: tx.rows("SELECT queue, spec{text}, updated_at FROM {s}flow_limits ORDER BY queue")
        )
        return [FlowLimits.from_json(r[0], codec.loads(r[1]), r[2]) for r in rows]

    async def set_flow_limits(self: HasDb, limits: FlowLimits) -> None:
        sql = ("INSERT INTO {s}flow_limits (queue, spec, updated_at) VALUES (?, {json}, ?) "
               "ON CONFLICT (queue) DO UPDATE SET spec = EXCLUDED.spec, updated_at = EXCLUDED.updated_at")  # fmt: skip
        args = (limits.queue, codec.dumps(limits.to_json(), "limits"), limits.updated_at)
        await self.db.write(lambda tx: tx.run(sql, args))

    async def delete_flow_limits(self: HasDb, queue: str) -> None:
        await self.db.write(lambda tx: tx.run("DELETE FROM {s}flow_limits WHERE queue = ?", (queue,)))

    async def flow_counts(self: HasDb) -> FlowCounts:
        async def op(tx: Tx) -> FlowCounts:
            depth = await tx.rows("SELECT queue, count(*) FROM {s}jobs WHERE {runnable} GROUP BY queue")
            running = await tx.rows("SELECT queue, count(*) FROM {s}jobs WHERE state = 'running' GROUP BY queue")
            return FlowCounts({q: int(n) for q, n in depth}, {q: int(n) for q, n in running})

        return await self.db.read(op)

    async def purge_dead_jobs(
        self: HasDb,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        async def op(tx: Tx) -> list[Event]:
            where, args = conditions(("jobs.tenant = ?", tenant), ("jobs.queue = ?", queue), base="jobs.state = 'dead'")
            if ids is not None:
                where, args = where + " AND jobs.id {in_array}", [*args, tx.d.array(ids)]
            doomed = await tx.jobs(f"{where} ORDER BY jobs.id LIMIT ?{{skip_locked}}", [*args, max(0, limit)])
            if not doomed:
                return []
            # As retention deletes: the row, its outgoing edges and (PostgreSQL) its watermarks; edges to it stay.
            gone = (tx.d.array(j.id for j in doomed),)
            await tx.run("DELETE FROM {s}jobs WHERE id {in_array}", gone)
            await tx.run("DELETE FROM {s}{deps} WHERE job_id {in_array}", gone)
            if tx.d.native:
                await tx.run("DELETE FROM {s}job_watermarks WHERE job_id {in_array}", gone)
            return await tx.events([ev.job_event(ev.DELETED, j) for j in doomed], now)

        return await self.db.write(op)
