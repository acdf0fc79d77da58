"""A store whose PostgreSQL server goes away for a while and comes back (a cluster of the test's own,
tests/support/pgcluster.py): its calls fail with ``StoreUnavailable`` meanwhile and work again by themselves
within seconds of the server's return, however long it was away.

The fleet-level run (API, scheduler, workers restarted under) is tests/acceptance/test_pg_restart.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.models import NewJob
from jobengine.errors import StoreUnavailable
from support.pgcluster import Cluster, postgres_cluster

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

    async def caller() -> None:
        """A loop of the process (a worker's claims, heartbeats, flushes): calls, and after a failure
        waits a little and calls again."""
        while True:
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
                assert time.monotonic() - back < 120, "the store never reconnected"
                await asyncio.sleep(0.1)
        finally:
            for task in callers:
                task.cancel()
            await asyncio.gather(*callers, return_exceptions=True)
        took = min(at for at in answered if at > back) - back
        print(f"the store answered {took:.1f} s after the server was back")
        assert took < 5.0, f"the store took {took:.1f} s to answer after the server was back"
    finally:
        await store.close()
