"""Queues as operators and tenants see them (``engine.queues``): their settings (paused, concurrency
limit), their jobs by state, their depth and pressure, and the dead-letter actions.

Queues are lanes shared by every tenant: changing a queue's settings is an operator's action. Every read that
takes a ``tenant`` counts only that tenant's jobs, and every dead-letter action acts only on them.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from jobengine.core.clock import Clock
from jobengine.core.flow.pressure import Pressure
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Job, JobFilter, check_name
from jobengine.core.states import RUNNABLE, JobState
from jobengine.engine.ahead import ReadAhead
from jobengine.engine.counts import StoreCounts
from jobengine.engine.flow import FlowControl
from jobengine.errors import InvalidJob
from jobengine.ports.deadletter import DeadLetterStore
from jobengine.ports.queues import QueueSettings, QueueSettingsStore
from jobengine.ports.store import Store

#: How long a process trusts the queue settings it read before reading them again (pause, resume and
#: limits changed in another process apply within this time; in this process, at once).
QUEUE_SETTINGS_TTL = 1.0


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as a tenant sees it: its jobs by state (only the tenant's) and the shared settings."""

    name: str
    counts: Mapping[str, int]
    paused: bool = False
    concurrency: int | None = None


class QueueSettingsCache:
    """The queues' settings, read again after QUEUE_SETTINGS_TTL seconds: every claim consults them, and a
    change made in this process is seen at once."""

    def __init__(self, store: QueueSettingsStore) -> None:
        self._store = store
        self._settings: dict[str, QueueSettings] = {}
        self._read_at = -1e18
        self._writes = 0  # a read that began before a write of this process is not kept
        self._ahead = ReadAhead("queue-settings")

    async def read(self, *, fresh: bool = False) -> dict[str, QueueSettings]:
        """Settings by queue name (``fresh`` reads them from the store now). Read again in the background
        past half their time, so that claims do not wait for it (:mod:`jobengine.engine.ahead`)."""
        age = time.monotonic() - self._read_at
        if fresh or age > QUEUE_SETTINGS_TTL:
            await self._reload()
        elif age > QUEUE_SETTINGS_TTL / 2:
            self._ahead.start(self._reload)
        return self._settings

    async def _reload(self) -> None:
        writes, read_at = self._writes, time.monotonic()
        settings = {s.queue: s for s in await self._store.list_queue_settings()}
        if writes == self._writes:
            self._settings, self._read_at = settings, read_at

    async def write(self, settings: QueueSettings) -> None:
        await self._store.set_queue_settings(settings)
        self._writes += 1
        self._settings[settings.queue] = settings


class Queues:
    """Queue settings and information, depth and pressure, and the dead-letter actions.

    Usage::

        await engine.queues.update("emails", paused=True)
        info = await engine.queues.get("emails", tenant="acme")
    """

    def __init__(
        self,
        jobs: Store,
        dead_letters: DeadLetterStore,
        settings: QueueSettingsCache,
        flow: FlowControl,
        clock: Clock,
        *,
        notify: Callable[[], None],
        publish: Callable[[Sequence[Event]], None],
    ) -> None:
        self._jobs = jobs
        #: The job counts of :meth:`list`, ``/metrics`` and the dashboard's overview: exact on a small store;
        #: on one that keeps many finished jobs, their states come from a full count up to a minute old.
        self.counts = StoreCounts(jobs)
        self._dead_letters = dead_letters
        self._settings = settings
        self._flow = flow
        self._clock = clock
        self._notify = notify
        self._publish = publish

    # -- settings -----------------------------------------------------------------------------------
    async def settings(self, *, fresh: bool = False) -> dict[str, QueueSettings]:
        """Settings by queue name, cached for QUEUE_SETTINGS_TTL seconds (``fresh`` reads them now)."""
        return await self._settings.read(fresh=fresh)

    async def update(
        self, queue: str, *, paused: bool | None = None, concurrency: int | None = None, unlimited: bool = False
    ) -> QueueSettings:
        """Pause / resume a queue or set its concurrency limit (``unlimited`` removes it). Queues are shared
        by every tenant: this is an operator's action. Raises InvalidJob for a bad name or limit."""
        check_name("queue", queue)
        if concurrency is not None and not (1 <= concurrency <= 1_000_000):
            raise InvalidJob("concurrency", "must be an integer from 1 to 1000000")
        current = (await self._settings.read(fresh=True)).get(queue) or QueueSettings(queue)
        new = QueueSettings(
            queue,
            current.paused if paused is None else paused,
            None if unlimited else (concurrency if concurrency is not None else current.concurrency),
            self._clock.now(),
        )
        await self._settings.write(new)
        if not new.paused:
            self._notify()  # workers waiting on a paused queue may claim now
        return new

    # -- what a tenant sees -------------------------------------------------------------------------
    async def list(self, tenant: str) -> builtins.list[QueueInfo]:
        """Every queue that has jobs of ``tenant`` or settings, with the tenant's counts by state (see
        :class:`~jobengine.engine.counts.StoreCounts`: the finished states of a store that keeps more than
        100,000 finished jobs may be up to a minute old)."""
        counts = await self.counts.counts(tenant)
        settings = await self._settings.read(fresh=True)
        names = sorted({q for q, _ in counts} | set(settings))
        out = []
        for name in names:
            by_state = {s.value: counts.get((name, s), 0) for s in JobState}
            s = settings.get(name) or QueueSettings(name)
            out.append(QueueInfo(name, by_state, s.paused, s.concurrency))
        return out

    async def get(self, name: str, tenant: str) -> QueueInfo:
        """The queue ``name`` as :meth:`list` shows it (all counts 0 for a queue it does not list)."""
        check_name("queue", name)
        for info in await self.list(tenant):
            if info.name == name:
                return info
        return QueueInfo(name, {s.value: 0 for s in JobState})

    async def depth(self, queue: str, tenant: str | None = None) -> int:
        """Runnable jobs of ``queue``: every tenant's (what admission counts) when ``tenant`` is None, else
        only ``tenant``'s — a tenant's caller must not learn how much work other tenants have queued."""
        if tenant is None:
            return (await self._flow.counts(fresh=True)).depth.get(queue, 0)
        counts = await self._jobs.count_jobs(tenant, finished=False)
        return sum(counts.get((queue, s), 0) for s in RUNNABLE)

    async def pressure(self, queue: str) -> Pressure:
        """The queue's state now: ``hard`` once full (the next enqueue would be refused), ``soft`` past the
        soft limit, else ``none``."""
        return await self._flow.pressure(queue)

    # -- the dead-letter ----------------------------------------------------------------------------
    async def replay_dead(
        self, tenant: str, *, ids: Sequence[str] | None = None, queue: str | None = None, limit: int = 1000
    ) -> builtins.list[Job]:
        """Queue dead jobs of ``tenant`` again (those among ``ids`` / of ``queue``; oldest first, at most
        ``limit``). Ids that are not dead jobs of the tenant are left out."""
        if ids is not None:
            dead = [j for j in await self._jobs.get_jobs([JobId(i) for i in ids], tenant) if j.state is JobState.DEAD]
            dead = [j for j in dead if queue is None or j.queue == queue][:limit]
        else:
            dead = await self._jobs.list_jobs(
                JobFilter(tenant=tenant, states=(JobState.DEAD,), queue=queue, limit=limit)
            )
        if not dead:
            return []
        changed = await self._jobs.retry_jobs([j.id for j in dead], self._clock.now(), tenant)
        self._publish(changed.events)
        self._notify()
        return changed.jobs

    async def purge_dead(
        self, tenant: str, *, ids: Sequence[str] | None = None, queue: str | None = None, limit: int = 1000
    ) -> int:
        """Delete dead jobs of ``tenant`` now (with a ``job.deleted`` event each); returns how many."""
        job_ids = [JobId(i) for i in ids] if ids is not None else None
        events = await self._dead_letters.purge_dead_jobs(
            self._clock.now(), limit, tenant=tenant, ids=job_ids, queue=queue
        )
        self._publish(events)
        return len(events)
