"""The outbox and claims by id (:mod:`jobengine.ports.outbox`) for the in-memory store.

Mixed into :class:`MemoryStore`. The outbox rows are added in the same event-loop step as the jobs (no
``await`` in between), which is what one transaction means for a single-threaded in-memory store.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jobengine.core import transitions as tr
from jobengine.core.ids import JobId, WorkerId, new_lease_token
from jobengine.core.models import Changed, Event, Inserted, Job, NewEvent, NewJob
from jobengine.core.states import RUNNABLE
from jobengine.errors import ConfigError
from jobengine.ports.outbox import OUTBOXED_STATES, Outboxed, OutboxRow
from jobengine.ports.watermarks import Watermark


class _Internals(Protocol):
    """What the mixin uses of MemoryStore."""

    _jobs: dict[JobId, Job]
    _lock: asyncio.Lock
    _outbox_state: _OutboxState | None

    def _append(self, events: Iterable[NewEvent], now: float) -> list[Event]: ...

    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted: ...


@dataclass
class _OutboxState:
    rows: dict[int, tuple[OutboxRow, float]] = field(default_factory=dict)  # id -> (row, held until)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


def _state(store: _Internals) -> _OutboxState:
    if store._outbox_state is None:
        store._outbox_state = _OutboxState()
    return store._outbox_state


class MemoryOutboxMixin:
    _outbox_state: _OutboxState | None = None

    async def insert_jobs_outboxed(
        self: _Internals,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        hold: float = 0.0,
    ) -> Outboxed:
        if watermarks:
            raise ConfigError("watermark: the memory store does not keep watermarks")
        inserted = await self.insert_jobs(jobs, now, phases)
        state = _state(self)
        rows = []
        for job, created in zip(inserted.jobs, inserted.created, strict=True):
            if created and job.state in OUTBOXED_STATES:
                row_id = next(state.ids)
                row = OutboxRow(row_id, job.id, job.queue, job.run_at, dict((headers or {}).get(job.id, {})))
                state.rows[row_id] = (row, now + hold if hold > 0 and job.run_at <= now else 0.0)  # due now: held
                rows.append(row)
        return Outboxed(inserted, rows)

    async def claim_outbox(self: _Internals, now: float, limit: int, lease_seconds: float) -> list[OutboxRow]:
        state = _state(self)
        due = [row for row, held in state.rows.values() if row.available_at <= now and held <= now]
        due.sort(key=lambda r: r.id)
        out = due[: max(0, limit)]
        for row in out:
            state.rows[row.id] = (row, now + lease_seconds)
        return out

    async def delete_outbox(self: _Internals, ids: Sequence[int]) -> None:
        state = _state(self)
        for row_id in ids:
            state.rows.pop(row_id, None)

    async def outbox_due(self: _Internals, now: float) -> tuple[bool, float | None]:
        state = _state(self)
        due = any(row.available_at <= now and held <= now for row, held in state.rows.values())
        later = [row.available_at for row, _ in state.rows.values() if row.available_at > now]
        return due, (min(later) if later else None)

    async def claim_jobs(
        self: _Internals,
        ids: Sequence[JobId],
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
    ) -> Changed:
        async with self._lock:
            found = {self._jobs[i].id: self._jobs[i] for i in ids if i in self._jobs}
            names = set(tasks) if tasks is not None else None
            ready = [
                j
                for j in found.values()
                if j.state in RUNNABLE and j.run_at <= now and (names is None or j.task in names)
            ]
            ready.sort(key=lambda j: (-j.priority, j.run_at, j.id))
            jobs, events = [], []
            for job in ready:
                job, e = tr.start(job, worker, new_lease_token(), now + lease_seconds, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
            return Changed(jobs, self._append(events, now))

    async def overdue_jobs(self: _Internals, before: float, limit: int) -> list[Job]:
        late = [j for j in self._jobs.values() if j.state in RUNNABLE and j.run_at < before]
        late.sort(key=lambda j: (j.run_at, j.id))
        return late[: max(0, limit)]
