"""The store's reads (mixed into :class:`~jobengine.backends.postgres.store.PostgresStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobengine.backends.postgres import sql
from jobengine.backends.postgres.mixin import StoreCalls
from jobengine.backends.postgres.rows import job_from_row
from jobengine.core import codec
from jobengine.core.models import Job, JobFilter
from jobengine.ports.watermarks import WatermarkValue


class _Runs(StoreCalls, Protocol):
    _q: sql.Queries


class PostgresReadsMixin:
    async def expired_jobs(self: _Runs, now: float, limit: int) -> list[Job]:
        return [job_from_row(r) for r in await self._rows(self._q.expired, {"now": now, "limit": limit})]

    async def list_jobs(self: _Runs, filter: JobFilter) -> list[Job]:
        conds: list[str] = ["true"]
        params: dict[str, Any] = {"limit": max(0, filter.limit)}
        if filter.tenant is not None:
            conds.append("j.tenant = %(tenant)s::text")
            params["tenant"] = filter.tenant
        if filter.states:
            conds.append("j.state = ANY(%(states)s::text[])")
            params["states"] = [s.value for s in filter.states]
        if filter.queue is not None:
            conds.append("j.queue = %(queue)s::text")
            params["queue"] = filter.queue
        if filter.task is not None:
            conds.append("j.task = %(task)s::text")
            params["task"] = filter.task
        if filter.before_id is not None:
            conds.append("j.id < %(before)s::text")
            params["before"] = filter.before_id
        rows = await self._rows(sql.list_query(self.schema, " AND ".join(conds)), params)
        return [job_from_row(r) for r in rows]

    async def next_run_at(self: _Runs, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        if not queues or (tasks is not None and not tasks):
            return None
        params = {"queues": list(queues), "tasks": list(tasks) if tasks is not None else None}
        rows = await self._rows(self._q.next_run_at, params)
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    # -- watermarks ---------------------------------------------------------------------------------
    async def get_watermark(self: _Runs, source: str, key: str) -> WatermarkValue | None:
        """The highest value carried by a succeeded job for (source, key); None before the first."""
        rows = await self._rows(self._q.get_watermark, {"source": source, "key": key})
        if not rows:
            return None
        value: WatermarkValue = codec.loads(rows[0][0])
        return value
