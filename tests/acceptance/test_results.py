"""A producer waits for 1,000 results that a worker process produces, on SQLite and on PostgreSQL, with
``poll_interval`` at 60 s in both processes: every wait returns within a second of its job's completion.

That bound is one of correctness, not of speed: a wait that read the job on a timer (the old 50 ms loop
aside, any loop paced by ``poll_interval``) would miss it by up to a minute; only the store's notification
that the job finished (``Store.finished_notifier``) wakes it in time. The producer waits the way a user's
does, through each job's handle (``result()``), and gets each job's own return value. The lag of a job that
finished before its wait began counts from the wait's start (its first read answers it).
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from jobengine.core.models import Job, NewJob
from jobengine.engine import Engine, JobHandle
from jobengine.settings import Settings

from .conftest import Procs

# Each wait is bounded in time (within a second of its job's end): the serial tier runs these alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(600)]

JOBS = 1000
QUIET = {"JOBENGINE_POLL_INTERVAL": "60", "JOBENGINE_WORKER_CONCURRENCY": "20"}


async def produce_and_wait(procs: Procs, database: str, backend: str) -> None:
    env = {**QUIET, "JOBENGINE_DATABASE": database}
    procs.env.update(env)
    settings = Settings(database=database, poll_interval=60.0)
    async with Engine.from_settings(settings) as engine:  # migrates before the worker starts
        jobs = [NewJob("work", {"sleep": 0.02, "i": i}) for i in range(JOBS)]
        stored = await engine.enqueue_many(jobs)

        async def wait(job: Job) -> tuple[float, float, float | None, int]:
            started = time.time()
            handle: JobHandle[int] = JobHandle(engine, job)  # what ``task.enqueue`` hands a producer
            value = await handle.result(timeout=300)  # JobFailed unless the job succeeded
            return started, time.time(), handle.job.finished_at, value

        waits = asyncio.gather(*(wait(j) for j in stored))
        await asyncio.sleep(0.5)  # the waits begin (the worker takes seconds to start, so they wait)
        # Jobs of 20 ms on 20 slots: they end over a few seconds after the worker is up. Its readiness is
        # not awaited here: that wait would block this loop and delay the waits it measures.
        worker = procs.worker()
        results = await waits
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, procs.output(worker)

    assert [value for *_, value in results] == list(range(JOBS))  # each wait got its own job's result
    lags = []
    waited = 0
    for started, returned, finished_at, _ in results:
        assert finished_at is not None
        waited += finished_at > started
        lags.append(returned - max(finished_at, started))
    worst = max(lags)
    print(f"\n{backend}: {JOBS} waits, {waited} of them before their job ended; "
          f"lag after the job ended: max {worst:.3f}s, mean {sum(lags) / len(lags):.3f}s")  # fmt: skip
    assert waited >= JOBS // 2, "too few waits began before their job ended to show anything"
    assert worst < 1.0, f"a wait returned {worst:.3f}s after its job ended"


async def test_a_thousand_waits_on_sqlite_return_within_a_second(procs: Procs) -> None:
    await produce_and_wait(procs, procs.env["JOBENGINE_DATABASE"], "sqlite")


async def test_a_thousand_waits_on_postgresql_return_within_a_second(procs: Procs, postgres_dsn: str) -> None:
    await produce_and_wait(procs, postgres_dsn, "postgresql")
