"""The job counts of ``/metrics``, the queue listings and the dashboard's live overview
(``engine.counts.StoreCounts``) on a real SQLite store: shared for ``share`` seconds; exact each time while
a full count is cheap or finds few finished jobs; past both, the unfinished states stay exact and the
finished ones come from the last full count, run again in the background when it is old."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine import Engine
from jobengine.core.states import JobState
from jobengine.engine.counts import StoreCounts
from jobengine.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine.from_settings(Settings(database=str(tmp_path / "jobs.db"))) as engine:
        yield engine


def _by_state(counts: dict[tuple[str, JobState], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, state), n in counts.items():
        out[state.value] = out.get(state.value, 0) + n
    return out


async def test_counts_are_exact_at_every_scrape_while_a_full_count_is_cheap(engine: Engine) -> None:
    counts = StoreCounts(engine)  # a small store: its full count takes far less than 0.1 s
    jobs = [await engine.enqueue("t") for _ in range(3)]
    assert _by_state(await counts.counts()) == {"queued": 3}
    await engine.cancel(jobs[0].id)
    assert _by_state(await counts.counts()) == {"queued": 2, "cancelled": 1}


async def test_an_answer_is_shared_for_its_share_of_seconds(engine: Engine) -> None:
    clock = Clock()
    counts = StoreCounts(engine, clock=clock)
    await engine.enqueue("t", tenant="acme")
    assert _by_state(await counts.counts("acme", share=1.0)) == {"queued": 1}
    await engine.enqueue("t", tenant="acme")
    assert _by_state(await counts.counts("acme", share=1.0)) == {"queued": 1}  # the same answer, within its second
    assert _by_state(await counts.counts("acme")) == {"queued": 2}  # a caller that shares nothing counts
    await engine.enqueue("t", tenant="acme")
    clock.now += 1.5
    assert _by_state(await counts.counts("acme", share=1.0)) == {"queued": 3}


async def test_each_tenant_has_its_own_counts(engine: Engine) -> None:
    counts = StoreCounts(engine, cheap=-1.0, min_finished=0)  # every full count is expensive: reused once made
    gone = await engine.enqueue("t", tenant="acme")
    await engine.enqueue("t", tenant="acme")
    await engine.cancel(gone.id, tenant="acme")
    await engine.enqueue("t", tenant="globex")
    await engine.enqueue("t", tenant="globex")
    for _ in range(2):  # counted, then the finished states reused: each tenant's own
        assert _by_state(await counts.counts("acme")) == {"queued": 1, "cancelled": 1}
        assert _by_state(await counts.counts("globex")) == {"queued": 2}
        assert _by_state(await counts.counts()) == {"queued": 3, "cancelled": 1}


async def test_an_expensive_full_count_is_reused_and_refreshed_in_the_background(engine: Engine) -> None:
    clock = Clock()
    counts = StoreCounts(engine, cheap=-1.0, min_finished=0, max_age=60.0, clock=clock)  # all expensive
    full = 0
    count_jobs = engine.count_jobs

    async def counted(tenant: str | None = None, *, finished: bool = True) -> dict[tuple[str, JobState], int]:
        nonlocal full
        full += finished
        return await count_jobs(tenant, finished=finished)

    engine.count_jobs = counted  # type: ignore[method-assign]
    jobs = [await engine.enqueue("t") for _ in range(3)]
    await engine.cancel(jobs[0].id)
    assert _by_state(await counts.counts()) == {"queued": 2, "cancelled": 1}
    assert full == 1  # the first scrape has nothing to reuse

    # Unfinished states are read afresh; the finished count is the last full one until it is old.
    await engine.cancel(jobs[1].id)
    await engine.enqueue("t")
    assert _by_state(await counts.counts()) == {"queued": 2, "cancelled": 1}
    assert full == 1

    clock.now = 61.0  # old: this scrape answers at once and starts the next full count
    assert _by_state(await counts.counts()) == {"queued": 2, "cancelled": 1}
    async with asyncio.timeout(30):  # the background count lands; scrapes meanwhile start no other
        while _by_state(await counts.counts()) != {"queued": 2, "cancelled": 2}:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the background count announces nothing
    assert full == 2


async def test_a_slow_count_of_few_finished_jobs_is_made_again_each_time(engine: Engine) -> None:
    # A busy machine can slow a small store's count past ``cheap``: its answers stay exact all the same.
    counts = StoreCounts(engine, cheap=-1.0, min_finished=2)
    first = await engine.enqueue("t")
    await engine.cancel(first.id)
    assert _by_state(await counts.counts()) == {"cancelled": 1}
    second = await engine.enqueue("t")
    await engine.cancel(second.id)
    assert _by_state(await counts.counts()) == {"cancelled": 2}  # one finished job: counted again
    third = await engine.enqueue("t")
    await engine.cancel(third.id)
    await engine.enqueue("t")
    # Two finished jobs at the last full count: from now on the finished states are reused.
    assert _by_state(await counts.counts()) == {"cancelled": 2, "queued": 1}


async def test_the_queue_listing_reads_only_the_unfinished_jobs_of_a_large_store(engine: Engine) -> None:
    engine.queues.counts = StoreCounts(engine.store, cheap=-1.0, min_finished=1)  # "large" from 1 finished job
    full = 0
    count_jobs = engine.store.count_jobs

    async def counted(tenant: str | None = None, *, finished: bool = True) -> dict[tuple[str, JobState], int]:
        nonlocal full
        full += finished
        return await count_jobs(tenant, finished=finished)

    engine.store.count_jobs = counted  # type: ignore[method-assign]
    done = await engine.enqueue("t", queue="mail", tenant="acme")
    await engine.cancel(done.id, tenant="acme")
    [info] = await engine.queues.list("acme")
    assert (info.name, info.counts["cancelled"], info.counts["queued"], full) == ("mail", 1, 0, 1)
    await engine.enqueue("t", queue="mail", tenant="acme")
    info = await engine.queues.get("mail", "acme")
    assert (info.counts["cancelled"], info.counts["queued"], full) == (1, 1, 1)  # no second full count
