"""The fleet: the workers alive now, what each can run, and the rescue of a dead worker's jobs.

``engine.fleet`` is one of these. Workers register through it when they start (a process on the store with
a liveness token, :mod:`jobengine.ports.workers`; a remote worker over HTTP when it claims), beat while
they live and unregister when they stop. :meth:`Fleet.rescue_dead` runs in every worker every
``liveness_interval``: a worker whose process is gone has its running jobs failed at once (an attempt
spent, as when a lease expires, so a job that kills its worker cannot loop forever) and run again, instead
of waiting out their leases. Every failure is fenced by lease token, so concurrent rescuers count it once.

Usage::

    for w in await engine.fleet.live():
        print(w.id, w.host, w.tasks, w.in_flight)
    reasons = await engine.fleet.waiting_reasons(jobs)   # {job id: "no worker runs task 'report'"}
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from jobengine.core.clock import Clock
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed, Failure, Job
from jobengine.core.states import RUNNABLE
from jobengine.core.transitions import lost_attempt
from jobengine.ports.workers import WorkerInfo, WorkerRegistry
from jobengine.version import __version__

#: Jobs of dead workers rescued per pass; the rest in the next.
RESCUE_BATCH = 1000
#: Seconds between refreshes of a remote worker's row while nothing about it changed.
REMOTE_REFRESH = 5.0
#: How long a read of the live workers is reused by :meth:`Fleet.live_cached` (job listings ask per page).
LIVE_CACHE_SECONDS = 1.0


def new_lock_key() -> int:
    """A liveness key no other worker has (63 random bits: a signed 64-bit integer, positive)."""
    return int.from_bytes(os.urandom(8), "big") >> 1


def local_worker(
    worker: WorkerId, queues: Sequence[str], tasks: Sequence[str], *, concurrency: int, packs: Sequence[str] = ()
) -> WorkerInfo:
    """The registry row of a worker in this process, with a fresh liveness key."""
    return WorkerInfo(
        id=worker,
        kind="local",
        host=socket.gethostname(),
        pid=os.getpid(),
        version=__version__,
        queues=tuple(queues),
        tasks=tuple(sorted(set(tasks))),
        packs=tuple(packs) or packs_of(tasks),
        concurrency=concurrency,
        lock_key=new_lock_key(),
    )


def packs_of(tasks: Sequence[str]) -> tuple[str, ...]:
    """The packs (``name@digest``) that pack task names (``name@digest:task``) belong to."""
    return tuple(sorted({t.rpartition(":")[0] for t in tasks if "@" in t}))


class Fleet:
    def __init__(
        self,
        registry: WorkerRegistry,
        clock: Clock,
        *,
        expiry: float,
        fail_jobs: Callable[[Sequence[Failure]], Awaitable[Changed]],
    ) -> None:
        """``expiry``: seconds a worker stays listed after its last beat (a worker beats every heartbeat);
        ``fail_jobs``: the engine's instrumented failure path (events, signatures, run summaries)."""
        self.registry = registry
        self.clock = clock
        self.expiry = expiry
        self._fail_jobs = fail_jobs
        self._cache: tuple[float, list[WorkerInfo]] | None = None
        self._remote: dict[WorkerId, tuple[WorkerInfo, float]] = {}  # remote workers last written (monotonic)

    async def register(self, info: WorkerInfo) -> WorkerInfo:
        now = self.clock.now()
        info = info.seen(now, now + self.expiry)
        if not info.started_at:
            info = replace(info, started_at=now)
        await self.registry.register(info)
        self._cache = None
        return info

    async def beat(self, worker: WorkerId) -> bool:
        """False: this worker was declared dead (its row is gone); it must register again, and its jobs'
        leases are gone."""
        now = self.clock.now()
        return await self.registry.beat(worker, now, now + self.expiry)

    async def unregister(self, worker: WorkerId) -> None:
        await self.registry.unregister(worker)
        self._cache = None

    async def seen_remote(self, info: WorkerInfo, long_poll: float) -> None:
        """A remote worker (over HTTP) claimed: register it, or refresh its row (at most every few seconds
        while nothing about it changed). It has no liveness token: it is listed until ``expiry`` plus
        ``long_poll`` (its longest silence while waiting for work) after it last claimed."""
        now = self.clock.now()
        last = self._remote.get(info.id)
        if last is not None and last[0] == info and time.monotonic() - last[1] < REMOTE_REFRESH:
            return
        await self.registry.register(
            replace(info, started_at=now, last_seen=now, expires_at=now + self.expiry + long_poll)
        )
        self._remote[info.id] = (info, time.monotonic())
        while len(self._remote) > 10_000:
            self._remote.pop(next(iter(self._remote)))

    async def live(self) -> list[WorkerInfo]:
        workers = await self.registry.live(self.clock.now())
        self._cache = (time.monotonic(), workers)
        return workers

    async def live_cached(self) -> list[WorkerInfo]:
        cached = self._cache
        if cached is not None and time.monotonic() - cached[0] < LIVE_CACHE_SECONDS:
            return cached[1]
        return await self.live()

    async def rescue_dead(self) -> Changed:
        """Fail the attempts of the jobs that dead workers held, then forget those workers."""
        now = self.clock.now()
        dead = await self.registry.dead(now)
        if not dead:
            return Changed()
        # A remote worker's jobs keep their leases: its heartbeats, not its row, say whether it lives.
        gone = [w.id for w in dead if w.lock_key is not None]
        jobs = await self.registry.held_jobs(gone, RESCUE_BATCH) if gone else []
        failures = [f for j in jobs if (f := lost_attempt(j, now, "WorkerDied", f"worker {j.lease_worker} died"))]
        changed = await self._fail_jobs(failures) if failures else Changed()
        if len(jobs) < RESCUE_BATCH:  # else some are left: the next pass takes them, then the rows
            await self.registry.remove([w.id for w in dead])
            self._cache = None
        return changed

    async def waiting_reasons(self, jobs: Sequence[Job]) -> dict[JobId, str]:
        """Why runnable jobs are not running, when no live worker can run them: "no worker runs task X",
        "no worker serves queue Q". Empty when nothing is known to hold them back (or no worker is
        registered at all, as with workers of versions that do not register)."""
        waiting = [j for j in jobs if j.state in RUNNABLE]
        if not waiting:
            return {}
        workers = await self.live_cached()
        if not workers:
            return {}
        tasks = {t for w in workers for t in w.tasks}
        queues = {q for w in workers for q in w.queues}
        reasons: dict[JobId, str] = {}
        for job in waiting:
            if job.task not in tasks:
                reasons[job.id] = f"no worker runs task {job.task!r}"
            elif job.queue not in queues:
                reasons[job.id] = f"no worker serves queue {job.queue!r}"
            elif not any(job.task in w.tasks and job.queue in w.queues for w in workers):
                reasons[job.id] = f"no worker runs task {job.task!r} on queue {job.queue!r}"
        return reasons

    async def known_tasks(self) -> set[str]:
        """Every task some live worker runs."""
        return {t for w in await self.live_cached() for t in w.tasks}
