"""A store whose PostgreSQL server goes away for a while and comes back (a cluster of the test's own,
tests/support/pgcluster.py): its calls fail with ``StoreUnavailable`` meanwhile and work again by themselves
within seconds of the server's return, however long it was away; and no live worker is declared dead
because the restart ended its liveness session.

The fleet-level run (API, scheduler, workers restarted under) is tests/acceptance/test_pg_restart.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.models import NewJob
from jobengine.errors import StoreUnavailable
from jobengine.ports.workers import WorkerInfo, WorkerRegistry
from support.deploy import ROOT
from support.pgcluster import Cluster, postgres_cluster
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: Long enough for psycopg_pool's own backoff (1, 2, 4, 8, 16 s between tries) to leave its next try about
#: 10 s after the server's return; capped, the store tries every 2 s at most.
OUTAGE = 20.0
CALLERS = 4


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with postgres_cluster() as made:
        yield made


async def _count(store: PostgresStore) -> int | None:
    try:
        return sum((await store.count_jobs()).values())
    except StoreUnavailable:
        return None


@pytest.mark.serial
async def test_the_store_is_back_within_seconds_of_a_long_outage(cluster: Cluster) -> None:
    store = PostgresStore(cluster.dsn)  # the pool of a worker process (its size and timeout)
    answered: list[float] = []  # when each call that worked returned (monotonic)
    done = asyncio.Event()

    async def caller() -> None:
        """A loop of the process (a worker's claims, heartbeats, flushes): calls, and after a failure
        waits a little and calls again. It also ends at ``done``: the test's end must not hang on a
        cancellation lost on its way (a failure then reports itself instead of a timeout)."""
        while not done.is_set():
            if await _count(store) is not None:
                answered.append(time.monotonic())
                await asyncio.sleep(0.05)
            else:
                await asyncio.sleep(0.5)

    try:
        await store.migrate()
        await store.insert_jobs([NewJob(task="t")], time.time(), [()])
        callers = [asyncio.create_task(caller()) for _ in range(CALLERS)]
        try:
            await asyncio.sleep(0.5)
            assert answered, "no call worked before the outage"
            await asyncio.to_thread(cluster.stop, "fast")
            await asyncio.sleep(OUTAGE)  # every call fails meanwhile, and the pool's backoff grows
            await asyncio.to_thread(cluster.start)
            back = time.monotonic()
            while not any(at > back for at in answered):
                assert time.monotonic() - back < 120, (
                    f"the store never reconnected; the server's log:\n{cluster.log()[-4000:]}"
                )
                await asyncio.sleep(0.1)
        finally:
            done.set()
            for task in callers:
                task.cancel()
            _, stuck = await asyncio.wait(callers, timeout=30)
            assert not stuck, f"{len(stuck)} caller(s) still in a store call 30 s after the test ended"
        took = min(at for at in answered if at > back) - back
        print(f"the store answered {took:.1f} s after the server was back")
        assert took < 5.0, f"the store took {took:.1f} s to answer after the server was back"
    finally:
        await store.close()


async def _locks(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def test_a_worker_slow_to_take_its_lock_again_after_a_restart_is_not_declared_dead(
    cluster: Cluster, tmp_path: Path
) -> None:
    """After a restart every worker's liveness session is new: a worker has ``RESTART_SETTLE_SECONDS`` to
    take its lock again (its reconnection backs off, a busy host is slow) before a free lock counts. A
    worker process stopped (SIGSTOP) across the restart is that slow; one SIGKILLed is declared dead once
    the settle time is over."""
    store = PostgresStore(cluster.dsn)
    await store.migrate()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": cluster.dsn, "NETBED_LEDGER": str(tmp_path),
           "NETBED_HOST": "w"}  # fmt: skip
    procs = Processes(tmp_path, env, ROOT)
    try:
        worker = procs.spawn("worker", "worker", "--app", "tests.support.netbed_app:app")
        procs.wait_output(worker, "started on queues", 120)
        registry = store.workers()
        assert await registry.dead(time.time()) == []
        worker.send_signal(signal.SIGSTOP)
        await asyncio.to_thread(cluster.restart, "fast")
        # Looks of a live worker's pass, for longer than the grace: the lock is free all along.
        looked = time.monotonic()
        while time.monotonic() - looked < 3.0:
            assert await _dead(registry) == [], "a worker was declared dead for a restart"
            await asyncio.sleep(0.2)
        worker.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while await _locks(cluster.dsn) < 1:
            assert time.monotonic() < deadline, "the worker never took its lock again"
            await asyncio.sleep(0.2)
        assert await registry.dead(time.time()) == []
        assert worker.poll() is None and "declared dead" not in procs.output(worker)

        # A worker that is gone is still found: once the server has been up long enough, at once.
        await asyncio.to_thread(cluster.restart, "fast")
        procs.kill(worker)
        deadline = time.monotonic() + 60
        while not (dead := await _dead(registry)):
            assert time.monotonic() < deadline, "the killed worker was never declared dead"
            await asyncio.sleep(0.5)
        assert len(dead) == 1
    finally:
        procs.stop_all()
        await store.close()


async def _dead(registry: WorkerRegistry) -> list[WorkerInfo]:
    """The registry's dead workers; none while the store is reconnecting."""
    try:
        return await registry.dead(time.time())
    except StoreUnavailable:
        return []
