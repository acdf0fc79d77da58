"""Stopping a worker when a cancellation goes missing, or a stop comes at an awkward moment.

A cancellation can be lost on its way: on Python 3.11, ``asyncio.wait_for`` returns the result of an
awaitable that finished at the moment it was cancelled, and drops the cancellation (drivers and broker
clients have such spots too). The notifier below does exactly that, deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jobengine.core.models import Job
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.ports.notifier import Notifier
from jobengine.worker import JobContext, Worker
from jobengine.worker.runtime import WorkerOptions

OPTIONS = WorkerOptions(concurrency=2, heartbeat_every=0.05, lease_seconds=5.0, poll_interval=0.05, grace_period=5.0)


class DropsOneCancellation:
    """A notifier whose ``wait`` swallows the first cancellation it receives and answers "woken", as
    ``asyncio.wait_for`` on Python 3.11 does when the event is set just as its caller is cancelled."""

    def __init__(self, inner: Notifier) -> None:
        self.inner = inner
        self.dropped = 0
        self.waiting = asyncio.Event()

    def notify(self) -> None:
        self.inner.notify()

    async def wait(self, timeout: float) -> bool:
        self.waiting.set()
        try:
            return await self.inner.wait(timeout)
        except asyncio.CancelledError:
            if self.dropped:
                raise
            self.dropped += 1
            return True
        finally:
            self.waiting.clear()

    async def close(self) -> None:
        await self.inner.close()


class Source:
    """The engine's transitions as the worker's source, with a notifier of the test's choosing."""

    def __init__(self, engine: Engine, notifier: Notifier) -> None:
        self.engine = engine
        self._notifier = notifier

    def notifier(self) -> Notifier:
        return self._notifier

    def __getattr__(self, name: str) -> object:
        return getattr(self.engine.transitions, name)


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = Engine(open_store("memory"))

    @e.task()
    async def short(ctx: JobContext) -> None:
        await asyncio.sleep(0.01)

    async with e:
        yield e


async def test_a_stop_whose_cancellation_is_lost_still_ends_the_pump(engine: Engine) -> None:
    notifier = DropsOneCancellation(engine.notifier())
    worker = Worker(Source(engine, notifier), OPTIONS)  # type: ignore[arg-type]
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(10):
        await notifier.waiting.wait()
    worker.stop()
    # Arrives as the stop does: a pump that lost its cancellation would wake, claim it and run on forever.
    job = await engine.enqueue("short")
    done, _ = await asyncio.wait([task], timeout=10)
    assert done, "the worker did not return after stop()"
    assert notifier.dropped == 1
    assert ((j := await engine.get_job(job.id)).state, j.attempt) == (JobState.QUEUED, 0)


async def test_a_job_claimed_as_the_stop_comes_is_released_not_begun() -> None:
    engine = Engine(open_store("memory"))
    begun: list[str] = []

    @engine.task()
    async def short(ctx: JobContext) -> None:
        begun.append(ctx.job_id)

    async with engine:
        worker = engine.worker(concurrency=2, poll_interval=0.05, grace_period=5.0)
        start = worker._start

        def start_then_signal(job: Job) -> None:
            start(job)
            worker.stop()  # the signal handler runs after the pump started the job, before the job's first step

        worker._start = start_then_signal  # type: ignore[method-assign]
        job = await engine.enqueue("short")
        async with asyncio.timeout(10):
            await worker.run()
        final = await engine.get_job(job.id)
    assert begun == [], "a job began on a worker that was stopping"
    assert (final.state, final.attempt, final.lease_token) == (JobState.QUEUED, 0, None)
