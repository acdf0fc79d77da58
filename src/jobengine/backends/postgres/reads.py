"""The store's reads (mixed into :class:`~jobengine.backends.postgres.store.PostgresStore`)."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.backends.postgres.mixin import StoreCalls
from jobengine.backends.postgres.rows import job_from_row
from jobengine.backends.sql.base import conditions
from jobengine.core import codec
from jobengine.core.ids import prefix_range
from jobengine.core.models import Job, JobFilter
from jobengine.ports.watermarks import WatermarkValue


class PostgresReadsMixin:
    async def expired_jobs(self: StoreCalls, now: float, limit: int) -> list[Job]:
        return [job_from_row(r) for r in await self._rows(self._q.expired, {"now": now, "limit": limit})]

    async def list_jobs(self: StoreCalls, filter: JobFilter) -> list[Job]:
        f = filter
        clause, args = conditions(
            ("jobs.tenant = ?", f.tenant), ("jobs.queue = ?", f.queue), ("jobs.task = ?", f.task),
            ("jobs.id < ?", f.before_id), ("jobs.created_at > ?", f.created_after),
            ("jobs.created_at < ?", f.created_before),
            # jsonb's text puts a space after ':' and ',': a search finds values and keys, not "k":"v" pairs.
            ("strpos(jobs.payload::text, ?) > 0", f.payload_text),
        )  # fmt: skip
        if f.id_prefix is not None:
            clause, args = clause + " AND jobs.id >= ? AND jobs.id < ?", [*args, *prefix_range(f.id_prefix)]
        if f.states:
            clause, args = clause + " AND jobs.state {in_array}", [*args, [s.value for s in f.states]]
        where = f"{clause} ORDER BY jobs.id DESC LIMIT ?"
        return await self.db.read(lambda tx: tx.jobs(where, [*args, max(0, f.limit)]))

    async def next_run_at(self: StoreCalls, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        if not queues or (tasks is not None and not tasks):
            return None
        params = {"queues": list(queues), "tasks": list(tasks) if tasks is not None else None}
        rows = await self._rows(self._q.next_run_at, params)
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    # -- watermarks ---------------------------------------------------------------------------------
    async def get_watermark(self: StoreCalls, source: str, key: str) -> WatermarkValue | None:
        """The highest value carried by a succeeded job for (source, key); None before the first."""
        rows = await self._rows(self._q.get_watermark, {"source": source, "key": key})
        if not rows:
            return None
        value: WatermarkValue = codec.loads(rows[0][0])
        return value
