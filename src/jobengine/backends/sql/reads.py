"""The store's reads that both SQL backends run as the same statement: jobs by id, counts, the event log and
the outbox's overdue jobs. Mixed into both stores; the reads whose SQL follows each backend's indexes
(``expired_jobs``, ``list_jobs``, ``next_run_at``) stay with each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from jobengine.core import codec
from jobengine.core.ids import IdKind, JobId, prefix_range
from jobengine.core.models import Event, Job
from jobengine.core.states import JobState

from .base import HasDb, conditions

#: The table and key column of each kind of id (:class:`~jobengine.ports.ids.IdIndex`).
_ID_COLUMNS: Final = {
    IdKind.JOB: ("jobs", "id"), IdKind.RUN: ("runs", "id"), IdKind.SCHEDULE: ("schedules", "id"),
    IdKind.ENDPOINT: ("webhook_endpoints", "id"), IdKind.DELIVERY: ("webhook_deliveries", "id"),
    IdKind.KEY: ("api_keys", "id"), IdKind.SIGNATURE: ("failure_signatures", "key"),
    IdKind.GRAPH: ("graphs", "id"),
}  # fmt: skip
#: The jobs that are not finished, one term per partial index that holds them (each repeats its index's WHERE
#: term, so the planner reads the index): counting them costs what the live jobs cost, not the finished ones
#: the store keeps.
_LIVE: Final = ("{runnable}", "state = 'running'", "state = 'blocked'")
_EVENTS: Final = "SELECT id, at, type, tenant, job_id, queue, task, data{text} FROM {s}events WHERE "


def event_from_row(r: Sequence[Any]) -> Event:
    """A row of ``id, at, type, tenant, job_id, queue, task, data`` (as text)."""
    return Event(r[0], r[1], r[2], r[3], JobId(r[4]) if r[4] is not None else None, r[5], r[6], codec.loads(r[7]))


def count_statement(tenant: str | None, finished: bool) -> tuple[str, list[Any]]:
    """``count_jobs``'s statement (with marks) and its parameters."""
    clause, args = conditions(("tenant = ?", tenant))
    if finished:
        return f"SELECT queue, state, count(*) FROM {{s}}jobs WHERE {clause} GROUP BY queue, state", args
    sql = " UNION ALL ".join(
        f"SELECT queue, state, count(*) FROM {{s}}jobs WHERE {live} AND {clause} GROUP BY queue, state"
        for live in _LIVE
    )
    return sql, args * len(_LIVE)


class SqlReadsMixin:
    async def get_jobs(self: HasDb, ids: Sequence[JobId], tenant: str | None = None) -> list[Job]:
        if not ids:
            return []
        jobs = await self.db.read(lambda tx: tx.jobs("jobs.id {in_array}", (tx.d.array(set(ids)),)))
        found = {j.id: j for j in jobs}
        return [job for i in ids if (job := found.get(i)) is not None and (tenant is None or job.tenant == tenant)]

    async def ids_with_prefix(self: HasDb, kind: IdKind, prefix: str, tenant: str | None, limit: int) -> list[str]:
        table, key = _ID_COLUMNS[kind]
        low, high = prefix_range(prefix)
        clause, args = conditions(("tenant = ?", tenant), base=f"{key}{{bytes}} >= ? AND {key}{{bytes}} < ?")
        sql = f"SELECT {key} FROM {{s}}{table} WHERE {clause} ORDER BY {key}{{bytes}} LIMIT ?"
        return [r[0] for r in await self.db.read(lambda tx: tx.rows(sql, [low, high, *args, limit]))]

    async def count_jobs(
        self: HasDb, tenant: str | None = None, *, finished: bool = True
    ) -> dict[tuple[str, JobState], int]:
        sql, args = count_statement(tenant, finished)
        return {(r[0], JobState(r[1])): int(r[2]) for r in await self.db.read(lambda tx: tx.rows(sql, args))}

    async def list_events(
        self: HasDb, after_id: int, limit: int, job_id: JobId | None = None, tenant: str | None = None
    ) -> list[Event]:
        clause, args = conditions(("job_id = ?", job_id), ("tenant = ?", tenant), base="id > ?")
        sql, args = f"{_EVENTS}{clause} ORDER BY id LIMIT ?", [after_id, *args, max(0, limit)]
        return [event_from_row(r) for r in await self.db.read(lambda tx: tx.rows(sql, args))]

    async def overdue_jobs(self: HasDb, before: float, limit: int, after: tuple[float, str] | None = None) -> list[Job]:
        if after is None:
            where = "{runnable} AND jobs.run_at < ? ORDER BY jobs.run_at, jobs.id LIMIT ?"
            return await self.db.read(lambda tx: tx.jobs(where, (before, limit)))
        where = (
            "{runnable} AND jobs.run_at < ? AND (jobs.run_at > ? OR (jobs.run_at = ? AND jobs.id > ?))"
            " ORDER BY jobs.run_at, jobs.id LIMIT ?"
        )
        at, job_id = after
        return await self.db.read(lambda tx: tx.jobs(where, (before, at, at, job_id, limit)))
