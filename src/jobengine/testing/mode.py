"""Test mode: the app's own engine on a temporary SQLite store, its jobs run in this process on demand.

The app's task handles (``send_welcome.enqueue(...)``) hold the app's ``Engine`` object, so test mode changes
what that object runs on rather than handing out another engine: on entry it is rebuilt on a temporary
store, a frozen clock and the in-process transport, keeping what the app declared on it (its tasks, its event
bus and listeners); on exit it is closed and put back as it was, like Procrastinate's
``app.replace_connector(InMemoryConnector())``. :meth:`TestEngine.drain` runs the jobs with the real
worker (claims, leases, phases, retries, dependencies, outcomes), one at a time, and moves the frozen clock
over the waits between them (retry backoff, ``delay``), so a test never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from functools import cached_property
from types import TracebackType
from typing import Any

from jobengine.aio import call_on
from jobengine.core.clock import ManualClock
from jobengine.core.events import STARTED
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Job
from jobengine.core.queue_config import QueueConfig
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import ConfigError

#: Attributes the app sets on its engine after building it, kept in test mode besides ``tasks``, ``bus`` and
#: ``middleware`` (which the engine's constructor takes): the planners a schedule's template names, and the schedules
#: declared in code (whose keeper holds the engine itself, not its store).
KEPT = ("_planners", "periodic")

#: The attribute that marks an engine in test mode (gone when it leaves, with everything test mode set).
MARK = "_test_mode"

#: Seconds before the store is looked at again with no job event heard meanwhile (a safety net: every change
#: that ends a round comes with an event).
LOOK_AGAIN = 0.2


class TestEngine:
    """The app's ``engine`` in test mode while this is entered (``with`` or ``async with``): jobs are
    stored in a temporary SQLite database and run only when :meth:`drain` (or :meth:`drain_sync`) is
    called, in this process, by the real worker; no service and no worker process are needed. The app's
    task handles and ``engine`` work as in production. Usage::

        from jobengine.testing import TestEngine
        from myapp.jobs import engine, send_welcome

        def test_send_welcome() -> None:
            with TestEngine(engine) as t:
                handle = send_welcome.enqueue_sync("ada@example.com")
                t.drain_sync()                       # runs it, its retries and what it enqueued
                assert handle.result_sync() == "sent to ada@example.com"

        async def test_send_welcome_async() -> None:
            async with TestEngine(engine) as t:
                handle = await send_welcome.enqueue("ada@example.com")
                await t.drain()
                assert await handle.result() == "sent to ada@example.com"

    ``clock`` is the engine's clock in test mode: frozen at the real time of entry, moved only by
    :meth:`drain` (to the next job's time) or by the test (``t.clock.advance(3600)``). The engine's
    settings are kept except where they would reach a service: ``database`` (a temporary file), ``queue``
    (the database transport) and ``flow_limits`` (none). Entering an engine already in test mode is
    ConfigError.
    """

    __test__ = False  # a class named Test* that pytest must not collect from a user's test module

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.clock = ManualClock(time.time())
        self._saved: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"TestEngine({self.engine!r}, entered={self._saved is not None})"

    # -- entering and leaving -------------------------------------------------------------------------
    def _swap_in(self) -> None:
        engine = self.engine
        if self._saved is not None or MARK in engine.__dict__:
            raise ConfigError("engine: it is in test mode already")
        saved = dict(engine.__dict__)
        settings = replace(engine.settings, database="memory", queue=QueueConfig(), flow_limits="")
        engine.__dict__.clear()
        try:
            Engine.__init__(engine, open_store("memory", settings), settings, self.clock, tasks=saved["tasks"],
                            bus=saved["bus"], middleware=saved["middleware"])  # fmt: skip
        except BaseException:
            engine.__dict__.clear()
            engine.__dict__.update(saved)
            raise
        built = set(engine.__dict__)
        for name, value in saved.items():
            # What the app set on the engine itself stays; what the constructor or a cached service built
            # for the real store does not.
            if name in KEPT or (name not in built and not isinstance(getattr(Engine, name, None), cached_property)):
                engine.__dict__[name] = value
        engine.__dict__[MARK] = self
        self._saved = saved

    def _swap_out(self) -> None:
        saved, self._saved = self._saved, None
        if saved is not None:
            self.engine.__dict__.clear()
            self.engine.__dict__.update(saved)

    def __enter__(self) -> TestEngine:
        """Test mode for code that is not async: the engine starts on its sync facade's loop, where
        ``enqueue_sync``, ``result_sync`` and :meth:`drain_sync` run."""
        self._swap_in()
        try:
            self.engine.__enter__()
        except BaseException:
            self._swap_out()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._saved is not None:
                self.engine.__exit__(exc_type, exc, tb)
        finally:
            self._swap_out()

    async def __aenter__(self) -> TestEngine:
        self._swap_in()
        try:
            await self.engine.start()
        except BaseException:
            await self.engine.close()
            self._swap_out()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.engine.close()
        finally:
            self._swap_out()

    # -- running jobs -----------------------------------------------------------------------------------
    async def drain(self, *, advance: bool = True, timeout: float = 60.0) -> list[Job]:
        """Run jobs until none is left to run: each due job with the real worker, one at a time (highest
        priority first), then, with ``advance``, move :attr:`clock` to the next job's time (a retry's backoff,
        a ``delay``) and run that, and so on; jobs enqueued by the tasks run too. Returns the jobs that ran,
        as they are at the end (a job that failed and was retried is there once). A job of a task this
        engine does not register is left queued; so is one that waits for such a job.
        ``advance=False``: only the jobs due now (a retry's next attempt waits for the test's
        ``clock.advance``). TimeoutError if jobs still run after ``timeout`` seconds (a task that enqueues
        itself forever); the worker is stopped first."""
        engine = self._entered()
        watch = _Watch(asyncio.get_running_loop())
        engine.bus.add_listener(watch.heard)
        try:
            try:
                async with asyncio.timeout(timeout):
                    while True:
                        await self._run_due(engine, watch)
                        nxt = await engine.store.next_run_at(await self._queues(engine), engine.tasks.names())
                        if nxt is None or not advance:
                            break
                        self.clock.set(max(nxt, self.clock.now()))
            except TimeoutError:
                raise TimeoutError(f"drain: jobs still ran after {timeout:g}s (a task that enqueues itself?)") from None
        finally:
            engine.bus.remove_listener(watch.heard)
        return await engine.get_jobs(list(watch.started))

    def drain_sync(self, *, advance: bool = True, timeout: float = 60.0) -> list[Job]:
        """:meth:`drain` for code that is not async, on the loop ``enqueue_sync`` uses. Usage::

        send_welcome.enqueue_sync("ada@example.com")
        (job,) = t.drain_sync()
        assert job.state is JobState.SUCCEEDED
        """
        return self._entered()._sync(self.drain(advance=advance, timeout=timeout))

    def _entered(self) -> Engine:
        if self._saved is None:
            raise ConfigError("engine: enter the TestEngine first (`with TestEngine(engine) as t:`)")
        return self.engine

    async def _queues(self, engine: Engine) -> list[str]:
        """Every queue holding a job not finished, and those of the registered tasks: a job enqueued to a
        queue of its own runs too."""
        counts = await engine.count_jobs(finished=False)
        return sorted({queue for queue, _ in counts} | set(engine.tasks.queues()))

    async def _due(self, engine: Engine, queues: list[str]) -> bool:
        """A job is running, or one of a registered task is due now."""
        counts = await engine.count_jobs(finished=False)
        if any(state is JobState.RUNNING and n for (_, state), n in counts.items()):
            return True
        nxt = await engine.store.next_run_at(queues, engine.tasks.names())
        return nxt is not None and nxt <= self.clock.now()

    async def _run_due(self, engine: Engine, watch: _Watch) -> None:
        """Run a worker until no job runs and none is due: a claimed job is ``running`` in the store until
        its outcome is stored, and a finished job's dependents are queued in that same transaction, so
        no job is between the two when the store shows neither."""
        queues = await self._queues(engine)
        if not await self._due(engine, queues):
            return
        worker = engine.worker(
            queues=tuple(queues), concurrency=1, tune_gc=False, poll_interval=0.05, flush_spacing=0.0,
            grace_period=0.0,
        )  # fmt: skip
        running = asyncio.create_task(worker.run(), name="jobengine-testing-worker")
        try:
            while True:
                watch.changed.clear()  # before the look: a change after it wakes the wait below
                if running.done() or not (worker.in_flight or await self._due(engine, queues)):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(LOOK_AGAIN):
                        await watch.changed.wait()
        except BaseException:
            worker.stop()
            worker.stop()  # drain's timeout: the job in flight is stopped and released at once
            await asyncio.gather(running, return_exceptions=True)  # the error to raise is this one
            raise
        worker.stop()
        await running


class _Watch:
    """A bus listener for one drain: the jobs that started, and a wake-up at each job event. Events come
    from the thread that made the transition, which may not be the drain's (an ``enqueue_sync``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.started: dict[JobId, None] = {}  # in the order they first started
        self.changed = asyncio.Event()
        self._loop = loop

    def heard(self, event: Event) -> None:
        if event.type == STARTED and event.job_id is not None:
            self.started[event.job_id] = None
        call_on(self._loop, self.changed.set)
