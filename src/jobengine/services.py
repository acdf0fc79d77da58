"""Long-running parts of a process, behind one small protocol so a command can start and stop them as a list.

``jobengine up`` runs several services in one process (the worker, retention, the live view, and later the
HTTP API); ``jobengine worker`` runs fewer. Each service is started in order and stopped in reverse order::

    services = [RetentionService(engine), WorkerService(engine.worker())]
    for s in services:
        await s.start()
    ...
    for s in reversed(services):
        await s.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

from jobengine.core.models import Pruned
from jobengine.engine import Engine
from jobengine.worker.runtime import Worker

if TYPE_CHECKING:  # the scheduler's modules load with the first SchedulerService: a worker needs none of them
    from jobengine.scheduler.loop import SchedulerLoop

log = logging.getLogger("jobengine.services")


class Service(Protocol):
    """A background part of a process.

    ``start()`` returns once the service is running (its work continues in background tasks of the running
    loop); ``stop()`` returns once it has stopped. Both are idempotent: a second ``start()`` while running
    and a ``stop()`` of a stopped (or never started) service do nothing.
    """

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class RetentionService:
    """Calls ``engine.prune()`` and ``engine.runs.prune()`` every ``interval`` seconds (default:
    ``settings.retention_interval``).

    Terminal jobs older than ``stale_after`` become ``stale``, stale jobs older than ``delete_after`` are
    deleted; running and waiting jobs are never touched (the store guarantees it). The first pass runs at
    once on start. Failure policy: a failed pass is logged and tried again at the next interval, so a
    database hiccup never stops the service. Retention is idempotent, so running it in several processes
    at once is safe, only wasteful (until it runs under the Leader port).
    """

    name = "retention"

    def __init__(self, engine: Engine, interval: float | None = None, batch: int = 10_000) -> None:
        self.engine = engine
        self.interval = interval if interval is not None else engine.settings.retention_interval
        if self.interval <= 0:
            raise ValueError("interval: must be a positive number of seconds")
        self.batch = batch
        self.passes = 0  # completed passes (for tests and status output)
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> Pruned:
        """One pass: stale then delete, until a batch comes back short (so a backlog drains in one pass)."""
        staled = deleted = 0
        events = []
        while True:
            pruned = await self.engine.prune(self.batch)
            staled += pruned.staled
            deleted += pruned.deleted
            events.extend(pruned.events)
            if pruned.staled + pruned.deleted < self.batch:
                break
        runs = 0
        while (n := await self.engine.runs.prune(self.batch)) > 0:
            runs += n
            if n < self.batch:
                break
        self.passes += 1
        if staled or deleted:
            log.info("retention: %d jobs became stale, %d were deleted", staled, deleted)
        if runs:
            log.info("retention: %d ended runs and tick records were deleted", runs)
        return Pruned(staled, deleted, events)

    async def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="jobengine-retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("retention pass failed; trying again in %gs", self.interval)
            await asyncio.sleep(self.interval)


class WorkerService:
    """A :class:`Worker` as a service. ``stop()`` is the graceful stop (finish in-flight jobs within the
    grace period, release the rest) and waits for it; :meth:`stop_now` releases every in-flight job at once
    and may be called while a graceful ``stop()`` is waiting (the second Ctrl-C)."""

    name = "worker"

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.worker.run(), name="jobengine-worker")

    async def wait(self) -> None:
        """Return when the worker has stopped (re-raising what made it stop, if it crashed)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is None:
            return
        if not self._stopping:
            self._stopping = True
            self.worker.stop()
        await asyncio.shield(self._task)

    def stop_now(self) -> None:
        if not self._stopping:  # the hard stop must be the worker's second stop request
            self._stopping = True
            self.worker.stop()
        self.worker.stop()


class SchedulerService:
    """The scheduler as a service: a :class:`SchedulerLoop` on ``engine.scheduler.leader("scheduler")``.

    Run it in as many processes as you like: only the leader fires, and firing is exactly once whatever
    happens to leadership (see ``jobengine.scheduler``). It wakes at once when a schedule changes in this
    process, else at the next tick or every ``scheduler_poll_interval``. ``stop()`` finishes the pass in
    progress and gives leadership up, so another process takes over without waiting for a lease to expire.
    """

    name = "scheduler"

    def __init__(self, engine: Engine, *, instance: str | None = None) -> None:
        from jobengine.scheduler.loop import SchedulerOptions

        s = engine.settings
        self.engine = engine
        self.options = SchedulerOptions(s.scheduler_poll_interval, s.scheduler_reconcile_interval, instance)
        self.loop = self._new_loop()
        engine.schedules.on_changed(lambda: self.loop.wake())
        self._task: asyncio.Task[None] | None = None

    def _new_loop(self) -> SchedulerLoop:
        from jobengine.scheduler.loop import SchedulerLoop

        passes = self.engine.scheduler
        return SchedulerLoop(passes, passes.leader("scheduler"), self.options)

    async def start(self) -> None:
        """Sync the schedules declared in code (``engine.periodic``), then run the loop."""
        if self._task is None or self._task.done():
            await self.engine.periodic.sync()
            if self.loop.stopped:  # a stopped loop stays stopped: start afresh
                self.loop = self._new_loop()
            self._task = asyncio.create_task(self.loop.run(), name="jobengine-scheduler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self.loop.stop()
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()
