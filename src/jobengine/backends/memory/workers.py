"""The worker registry of the in-memory store (:mod:`jobengine.ports.workers`). Every worker of a memory store
lives in its process, and dies with it and with the store: a registered worker with a liveness key is alive
while registered; one without (remote) is dead once ``expires_at`` has passed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from jobengine.core.ids import WorkerId
from jobengine.core.models import Job
from jobengine.core.states import JobState
from jobengine.ports.workers import WorkerInfo


class MemoryWorkers:
    def __init__(self, jobs: Callable[[], Sequence[Job]]) -> None:
        self._jobs = jobs
        self._rows: dict[WorkerId, WorkerInfo] = {}

    async def register(self, info: WorkerInfo) -> None:
        known = self._rows.get(info.id)
        self._rows[info.id] = info if known is None else replace(info, started_at=known.started_at)

    async def beat(self, worker: WorkerId, now: float, expires_at: float) -> bool:
        info = self._rows.get(worker)
        if info is None:
            return False
        self._rows[worker] = info.seen(now, expires_at)
        return True

    async def unregister(self, worker: WorkerId) -> None:
        self._rows.pop(worker, None)

    def _running(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self._jobs():
            if job.state is JobState.RUNNING and job.lease_worker is not None:
                counts[job.lease_worker] = counts.get(job.lease_worker, 0) + 1
        return counts

    async def live(self, now: float) -> list[WorkerInfo]:
        counts = self._running()
        rows = sorted((w for w in self._rows.values() if w.expires_at > now), key=lambda w: (w.started_at, w.id))
        return [replace(w, in_flight=counts.get(w.id, 0)) for w in rows]

    async def dead(self, now: float) -> list[WorkerInfo]:
        return [w for w in self._rows.values() if w.lock_key is None and w.expires_at <= now]

    async def held_jobs(self, workers: Sequence[WorkerId], limit: int) -> list[Job]:
        wanted = set(workers)
        held = [j for j in self._jobs() if j.state is JobState.RUNNING and j.lease_worker in wanted]
        return sorted(held, key=lambda j: j.id)[:limit]

    async def remove(self, workers: Sequence[WorkerId]) -> None:
        for w in workers:
            self._rows.pop(w, None)

    async def close(self) -> None:
        return None
