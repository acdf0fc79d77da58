"""The event log's bounds and the dead-letter purge on SQLite (their SQL is this backend's own: the
sequence table, the jobs' edges). Mixed into :class:`SqliteStore`; the rest of the HTTP layer's ports are
:mod:`jobengine.backends.sql`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from jobengine.core import events as ev
from jobengine.core.ids import JobId
from jobengine.core.models import Event

from .rows import append_events, json_list, select_jobs

T = TypeVar("T")


class _Runs(Protocol):
    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


def _purge_dead(
    c: sqlite3.Connection,
    now: float,
    limit: int,
    tenant: str | None,
    ids: Sequence[JobId] | None,
    queue: str | None,
) -> list[Event]:
    where, args = ["jobs.state = 'dead'"], []
    if tenant is not None:
        where.append("jobs.tenant = ?")
        args.append(tenant)
    if ids is not None:
        where.append("jobs.id IN (SELECT value FROM json_each(?))")
        args.append(json_list(ids))
    if queue is not None:
        where.append("jobs.queue = ?")
        args.append(queue)
    doomed = select_jobs(c, " AND ".join(where) + " ORDER BY jobs.id LIMIT ?", [*args, max(0, limit)])
    if not doomed:
        return []
    # As retention deletes (writes.prune_jobs): the row and its outgoing edges; edges to it stay.
    gone = json_list(j.id for j in doomed)
    c.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))", (gone,))
    c.execute("DELETE FROM job_deps WHERE job_id IN (SELECT value FROM json_each(?))", (gone,))
    return append_events(c, [ev.job_event(ev.DELETED, j) for j in doomed], now)


class SqliteApiMixin:
    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: _Runs) -> tuple[int, int]:
        def read(c: sqlite3.Connection) -> tuple[int, int]:
            oldest = c.execute("SELECT min(id) FROM events").fetchone()[0]
            # AUTOINCREMENT keeps the highest id ever assigned in sqlite_sequence, pruned or not.
            newest = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
            return int(oldest or 0), int(newest[0]) if newest else 0

        return await self._read(read)

    # -- DeadLetterStore ----------------------------------------------------------------------------
    async def purge_dead_jobs(
        self: _Runs,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        return await self._write(lambda c: _purge_dead(c, now, limit, tenant, ids, queue))
