"""The store's reads (mixed into :class:`~jobengine.backends.postgres.store.PostgresStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobengine.backends.postgres import sql
from jobengine.backends.postgres.mixin import StoreCalls
from jobengine.backends.postgres.rows import event_from_row, job_from_row
from jobengine.core import codec
from jobengine.core.ids import JobId, prefix_range
from jobengine.core.models import Event, Job, JobFilter
from jobengine.core.states import JobState
from jobengine.ports.watermarks import WatermarkValue


class _Runs(StoreCalls, Protocol):
    _q: sql.Queries


class PostgresReadsMixin:
    async def expired_jobs(self: _Runs, now: float, limit: int) -> list[Job]:
        return [job_from_row(r) for r in await self._rows(self._q.expired, {"now": now, "limit": limit})]

    async def get_jobs(self: _Runs, ids: Sequence[JobId], tenant: str | None = None) -> list[Job]:
        if not ids:
            return []
        found = {j.id: j for j in map(job_from_row, await self._rows(self._q.get, {"ids": list(set(ids))}))}
        return [found[i] for i in ids if i in found and (tenant is None or found[i].tenant == tenant)]

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
        if filter.id_prefix is not None:
            conds.append("j.id >= %(id_low)s::text AND j.id < %(id_high)s::text")
            params["id_low"], params["id_high"] = prefix_range(filter.id_prefix)
        if filter.created_after is not None:
            conds.append("j.created_at > %(created_after)s::float8")
            params["created_after"] = filter.created_after
        if filter.created_before is not None:
            conds.append("j.created_at < %(created_before)s::float8")
            params["created_before"] = filter.created_before
        if filter.payload_text is not None:
            # jsonb's text puts a space after ':' and ',': a search finds values and keys, not "k":"v" pairs.
            conds.append("strpos(j.payload::text, %(payload_text)s::text) > 0")
            params["payload_text"] = filter.payload_text
        rows = await self._rows(sql.list_query(self.schema, " AND ".join(conds)), params)
        return [job_from_row(r) for r in rows]

    async def count_jobs(self: _Runs, tenant: str | None = None) -> dict[tuple[str, JobState], int]:
        where = "tenant = %(tenant)s::text" if tenant is not None else "true"
        rows = await self._rows(sql.count_query(self.schema, where), {"tenant": tenant})
        return {(r[0], JobState(r[1])): int(r[2]) for r in rows}

    async def next_run_at(self: _Runs, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        if not queues or (tasks is not None and not tasks):
            return None
        params = {"queues": list(queues), "tasks": list(tasks) if tasks is not None else None}
        rows = await self._rows(self._q.next_run_at, params)
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def list_events(
        self: _Runs, after_id: int, limit: int, job_id: JobId | None = None, tenant: str | None = None
    ) -> list[Event]:
        where = ""
        params: dict[str, Any] = {"after": after_id, "limit": max(0, limit)}
        if job_id is not None:
            where += " AND job_id = %(job_id)s::text"
            params["job_id"] = job_id
        if tenant is not None:
            where += " AND tenant = %(tenant)s::text"
            params["tenant"] = tenant
        rows = await self._rows(sql.events_query(self.schema, where), params)
        return [event_from_row(r) for r in rows]

    # -- watermarks ---------------------------------------------------------------------------------
    async def get_watermark(self: _Runs, source: str, key: str) -> WatermarkValue | None:
        """The highest value carried by a succeeded job for (source, key); None before the first."""
        rows = await self._rows(self._q.get_watermark, {"source": source, "key": key})
        if not rows:
            return None
        value: WatermarkValue = codec.loads(rows[0][0])
        return value
