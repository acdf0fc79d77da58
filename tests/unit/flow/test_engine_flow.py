"""The engine's flow control on `database: memory` with a controlled clock: the adaptive limiter steers the
rate limited claims use (rising under success, halving under errors), and a rate limit holds claims back
without losing jobs."""

from __future__ import annotations

import asyncio

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.engine.flow import AIMD_INTERVAL
from jobengine.ports.flow import FlowCounts
from jobengine.settings import Settings


async def _engine(clock: ManualClock) -> Engine:
    store = open_store("memory")
    await store.migrate()
    return Engine(store, Settings(database="memory", flow_cache_seconds=0.0), clock)


async def test_adaptive_rate_rises_under_success_and_halves_under_errors() -> None:
    clock = ManualClock()
    engine = await _engine(clock)
    limits = await engine.flow.set_limits("q", rate=4.0, rate_floor=1.0, rate_ceiling=8.0, adaptive=True,
                                          target_error_rate=0.1)  # fmt: skip
    assert engine.flow.rate(limits) == 4.0
    rates = []
    for round_ in range(6):
        for _ in range(20):
            await engine.enqueue("t", queue="q")
        clock.advance(10)  # the bucket refills
        jobs = await engine.transitions.fetch_jobs(["q"], 100, WorkerId("w"), 30.0)
        assert 0 < len(jobs) <= 8  # never more than the bucket holds
        clock.advance(0.5)
        if round_ < 3:
            await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "", None) for j in jobs])
        else:
            err = AttemptError(1, clock.now(), "Boom", "boom")
            await engine.transitions.fail_jobs(
                [Failure(j.id, j.lease_token or "", err, FailOutcome.DEAD) for j in jobs]
            )
        clock.advance(AIMD_INTERVAL)
        rates.append(engine.flow.rate(limits))
    assert rates[:3] == sorted(rates[:3]) and rates[2] > 4.0  # success: up, additively
    assert rates[3] == rates[2] / 2 and rates[4] == max(1.0, rates[3] / 2)  # errors: halved, to the floor
    assert rates[5] == 1.0
    assert engine.flow.snapshot()["adaptive"] == {"q": 1.0}  # what /metrics shows


async def test_rate_limit_holds_claims_back_and_loses_nothing() -> None:
    clock = ManualClock()
    engine = await _engine(clock)
    await engine.flow.set_limits("q", rate=2.0, burst=2)
    for _ in range(10):
        await engine.enqueue("t", queue="q")
    assert len(await engine.transitions.fetch_jobs(["q"], 10, WorkerId("w"), 30.0)) == 2
    assert await engine.transitions.fetch_jobs(["q"], 10, WorkerId("w"), 30.0) == []
    nxt = await engine.transitions.next_run_at(["q"])
    assert nxt is not None and clock.now() < nxt <= clock.now() + 0.5  # the pump comes back for the next token
    clock.advance(1.0)
    assert len(await engine.transitions.fetch_jobs(["q"], 10, WorkerId("w"), 30.0)) == 2
    counts = await engine.count_jobs()
    assert counts[("q", JobState.QUEUED)] == 6 and counts[("q", JobState.RUNNING)] == 4
    await engine.flow.clear_limits("q")
    assert len(await engine.transitions.fetch_jobs(["q"], 10, WorkerId("w"), 30.0)) == 6


async def test_requests_that_find_the_counts_stale_together_share_one_read() -> None:
    """Every enqueue reads the flow counts once its cache is stale: concurrent ones wait for the read in
    flight rather than each sending their own; a fresh read always reads again."""
    engine = await _engine(ManualClock())
    await engine.enqueue("t", queue="q")
    store = engine.flow._store
    reads = 0
    real = store.flow_counts

    async def counted() -> FlowCounts:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)  # a slow read: the other callers arrive while it runs
        return await real()

    store.flow_counts = counted  # type: ignore[method-assign]
    answers = await asyncio.gather(*(engine.flow.counts() for _ in range(20)))
    assert reads == 1
    assert all(a.depth == {"q": 1} for a in answers)
    await asyncio.gather(engine.flow.counts(fresh=True), engine.flow.counts(fresh=True))
    assert reads == 3
