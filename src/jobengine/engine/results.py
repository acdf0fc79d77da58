"""Waiting for jobs' outcomes (``engine.wait_for``), woken by the store instead of polling it.

Every waiter of an event loop shares one pump: a dict of job id -> futures, one listening notifier
(:meth:`~jobengine.ports.store.Store.finished_notifier`: LISTEN on PostgreSQL, ``data_version`` on SQLite)
and one read of the jobs waited for per wake-up, in batches. Three things wake the pump:

- a terminal event on this process's bus (a worker in this process finished the job): only that job is read;
- the store's notification that jobs finished in any process: every job waited for is read again;
- a slow safety re-check (``recheck`` seconds, the smallest any waiter asked for), for a notification lost
  with a dropped connection.

A new waiter is read by the pump too, so a thousand waits that start together cost one read, not a
thousand. The notifier is listening before that first read, so a job that finishes after it is never
missed: SQLite compares the data version taken when the notifier opened, PostgreSQL wakes once when its
LISTEN is in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from jobengine.aio import call_on
from jobengine.bus import EventBus
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Job
from jobengine.errors import NotFound, StoreUnavailable
from jobengine.ports.notifier import Notifier
from jobengine.ports.store import Store

log = logging.getLogger("jobengine.results")

#: The events after which a job is terminal (a stale or deleted job was terminal before).
TERMINAL_EVENTS = frozenset({"job.succeeded", "job.dead", "job.cancelled", "job.stale", "job.deleted"})
#: Ids per read of the jobs waited for.
_BATCH = 500
#: Seconds before a read that failed (the store unreachable) is tried again.
_RETRY = 1.0


@dataclass(eq=False)
class _Pump:
    """The waiters of one event loop and the tasks that wake and answer them."""

    loop: asyncio.AbstractEventLoop
    notifier: Notifier
    futures: dict[JobId, list[tuple[asyncio.Future[Job], float]]] = field(default_factory=dict)
    dirty: set[JobId] = field(default_factory=set)
    everything: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    answering: asyncio.Task[None] | None = None
    listening: asyncio.Task[None] | None = None

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for t in (self.answering, self.listening) if t is not None]

    def mark(self, job_ids: Sequence[JobId] | None) -> None:
        if job_ids is None:
            self.everything = True
        else:
            self.dirty.update(job_ids)
        self.wake.set()

    @property
    def recheck(self) -> float:
        return min((every for waiting in self.futures.values() for _, every in waiting), default=5.0)


class Results:
    """``wait(job_id, timeout)``: the job once it is terminal. The jobs are read with ``store.get_jobs``;
    ``open_notifier`` opens a new finished-jobs notifier for an event loop (closed by :meth:`close`); ``bus``
    carries this process's events. Usage (``Engine.wait_for`` builds one on first use)::

        results = Results(store, bus, store.finished_notifier)
        job = await results.wait(job_id, timeout=60)
    """

    def __init__(self, store: Store, bus: EventBus, open_notifier: Callable[[], Notifier]) -> None:
        self._store = store
        self._bus = bus
        self._open_notifier = open_notifier
        self._pumps: dict[asyncio.AbstractEventLoop, _Pump] = {}
        self._listening = False

    async def wait(self, job_id: JobId, timeout: float, recheck: float = 5.0) -> Job:
        """The job when it is terminal. TimeoutError after ``timeout`` seconds; NotFound if it does not
        exist (or is deleted while waited for). ``recheck``: the longest the job goes unread when no
        notification comes."""
        if recheck <= 0:
            raise ValueError("recheck: must be positive")
        pump = self._pump()
        future: asyncio.Future[Job] = pump.loop.create_future()
        entry = (future, recheck)
        pump.futures.setdefault(job_id, []).append(entry)
        self._start(pump)
        pump.mark([job_id])
        try:
            async with asyncio.timeout(timeout):
                return await future
        finally:
            waiting = pump.futures.get(job_id)
            if waiting is not None and entry in waiting:
                waiting.remove(entry)
                if not waiting:
                    del pump.futures[job_id]

    async def close(self) -> None:
        """Stop the pumps and close their notifiers; waits still waiting raise StoreUnavailable."""
        if self._listening:
            self._bus.remove_listener(self._on_event)
            self._listening = False
        pumps, self._pumps = self._pumps, {}
        current = asyncio.get_running_loop()
        for pump in pumps.values():
            if pump.loop.is_closed():  # its tasks and notifier went with it
                continue
            for waiting in pump.futures.values():
                for future, _ in waiting:
                    pump.loop.call_soon_threadsafe(_closed, future)
            if pump.loop is current:
                for task in pump.tasks:
                    task.cancel()
                for task in pump.tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                await pump.notifier.close()
            else:
                for task in pump.tasks:
                    pump.loop.call_soon_threadsafe(task.cancel)
                with contextlib.suppress(Exception):
                    closing = asyncio.run_coroutine_threadsafe(pump.notifier.close(), pump.loop)
                    async with asyncio.timeout(5.0):
                        await asyncio.wrap_future(closing)

    def _pump(self) -> _Pump:
        loop = asyncio.get_running_loop()
        pump = self._pumps.get(loop)
        if pump is None:
            # The notifier opens before the first read of any job, so it sees every commit after that read.
            pump = self._pumps[loop] = _Pump(loop, self._open_notifier())
        if not self._listening:
            self._bus.add_listener(self._on_event)
            self._listening = True
        return pump

    def _start(self, pump: _Pump) -> None:
        """Each task stops when nobody waits (the listener within a re-check); the next waiter restarts it."""
        if pump.answering is None or pump.answering.done():
            pump.answering = pump.loop.create_task(self._answer(pump), name="jobengine-results")
        if pump.listening is None or pump.listening.done():
            pump.listening = pump.loop.create_task(self._listen(pump), name="jobengine-results-listen")

    def _on_event(self, event: Event) -> None:
        """A bus listener: quick, never raises. Off a pump's loop (the sync facade's) it is handed over."""
        if event.type not in TERMINAL_EVENTS:
            return
        for pump in list(self._pumps.values()):
            if event.job_id in pump.futures and not pump.loop.is_closed():
                call_on(pump.loop, pump.mark, [event.job_id])

    async def _listen(self, pump: _Pump) -> None:
        """Wake the pump when the store says jobs finished, and every ``recheck`` seconds regardless."""
        while pump.futures:
            try:
                await pump.notifier.wait(pump.recheck)
            except asyncio.CancelledError:
                raise
            except Exception:  # a notifier must not raise; if one does, the safety re-check goes on
                log.exception("the finished-jobs notifier failed")
                await asyncio.sleep(_RETRY)
            pump.mark(None)

    async def _answer(self, pump: _Pump) -> None:
        """Read the jobs marked, resolve the terminal ones; return when nobody waits any more."""
        while True:
            await pump.wake.wait()
            pump.wake.clear()
            if not pump.futures:
                if self._listening and not any(p.futures for p in self._pumps.values()):
                    # Nobody waits: the bus goes back to its fast path of no listeners.
                    self._bus.remove_listener(self._on_event)
                    self._listening = False
                return
            ids = list(pump.futures) if pump.everything else [i for i in pump.dirty if i in pump.futures]
            pump.everything = False
            pump.dirty.clear()
            try:
                jobs: list[Job] = []
                for start in range(0, len(ids), _BATCH):
                    jobs += await self._store.get_jobs(ids[start : start + _BATCH])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading jobs waited for failed (%s); trying again in %.1fs", exc, _RETRY)
                await asyncio.sleep(_RETRY)
                pump.mark(ids)
                continue
            found = {job.id: job for job in jobs}
            for job_id in ids:
                job = found.get(job_id)
                if job is not None and not job.terminal:
                    continue
                for future, _ in pump.futures.pop(job_id, []):
                    if future.done():
                        continue
                    if job is None:
                        future.set_exception(NotFound("job", job_id))
                    else:
                        future.set_result(job)


def _closed(future: asyncio.Future[Job]) -> None:
    if not future.done():
        future.set_exception(StoreUnavailable("the engine closed while waiting for the job"))
