"""FlowStore on every backend: limits, the limited claim (bucket, queue cap, key concurrency, filters),
counts, and that concurrent limited claims never pass a limit."""

from __future__ import annotations

import asyncio

import pytest

from jobengine.core import events as ev
from jobengine.core.flow.limits import FlowLimits
from jobengine.core.flow.select import ClaimRule
from jobengine.core.ids import WorkerId
from jobengine.core.states import JobState
from jobengine.ports.flow import FlowStore
from jobengine.ports.store import Store

from .helpers import LEASE, T0, completion, enqueue, new


def _flow(store: Store) -> FlowStore:
    assert isinstance(store, FlowStore)
    return store


async def _claim(store: Store, rule: ClaimRule, now: float = T0, limit: int = 100, worker: str = "w1") -> list[str]:
    changed = await _flow(store).claim_limited(rule, limit, WorkerId(worker), LEASE, now)
    assert [e.type for e in changed.events] == [ev.STARTED] * len(changed.jobs)
    assert all(j.state is JobState.RUNNING and j.lease_worker == worker for j in changed.jobs)
    return [j.id for j in changed.jobs]


async def test_limits_are_stored_replaced_and_deleted(store: Store) -> None:
    flow = _flow(store)
    a = FlowLimits("emails", rate=2.5, burst=4, rate_per="tenant", hard_limit=100, updated_at=T0)
    b = FlowLimits("zeta", concurrency=2, concurrency_key="payload.account", adaptive=False, updated_at=T0)
    await flow.set_flow_limits(b)
    await flow.set_flow_limits(a)
    assert await flow.list_flow_limits() == [a, b]
    a2 = FlowLimits("emails", soft_limit=5, updated_at=T0 + 1)
    await flow.set_flow_limits(a2)
    await flow.delete_flow_limits("zeta")
    assert await flow.list_flow_limits() == [a2]


@pytest.mark.parametrize("per", ["queue", "tenant", "task"])
async def test_token_bucket_is_shared_and_refills(store: Store, per: str) -> None:
    jobs = await enqueue(store, *[new(queue="q") for _ in range(10)])
    lim = FlowLimits("q", rate=2, burst=3, rate_per=per)
    rule = ClaimRule("q", None, lim, 2.0)
    first = await _claim(store, rule, T0, worker="w1")
    assert first == [j.id for j in jobs[:3]]  # the burst, in claim order
    assert await _claim(store, rule, T0 + 0.1, worker="w2") == []  # another worker: same bucket, empty
    assert len(await _claim(store, rule, T0 + 1.0, worker="w2")) == 2  # 1 s at 2/s: two tokens back
    assert await _claim(store, rule, T0 + 1.0) == []
    left = await store.get_jobs([j.id for j in jobs])
    assert sum(j.state is JobState.QUEUED for j in left) == 5  # nothing lost: the rest wait
    # Another tenant: its own bucket when buckets are per tenant or per (tenant, task), else the same one.
    [other] = await enqueue(store, new(queue="q", tenant="other"), now=T0 + 1.0)
    assert await _claim(store, rule, T0 + 1.0) == ([] if per == "queue" else [other.id])


async def test_queue_cap_and_key_concurrency(store: Store) -> None:
    jobs = await enqueue(
        store,
        new(queue="q", payload={"account": "A"}),
        new(queue="q", payload={"account": "A"}),
        new(queue="q", payload={"account": "B"}),
        new(queue="q", payload={"other": 1}),
        new(queue="q", payload={"account": 7}),
        new(queue="q", payload={"account": 7}),
    )
    lim = FlowLimits("q", concurrency=1, concurrency_key="payload.account")
    got = await _claim(store, ClaimRule("q", 3, lim))
    assert got == [jobs[0].id, jobs[2].id, jobs[3].id]  # A once, B, no key; the queue cap stops at 3
    assert await _claim(store, ClaimRule("q", 3, lim)) == []  # the cap counts running jobs
    more = await _claim(store, ClaimRule("q", 10, lim))
    assert more == [jobs[4].id]  # A still runs; 7 gets one slot
    [running] = await store.get_jobs([jobs[0].id])
    await store.complete_jobs([completion(running)], T0 + 1)
    assert await _claim(store, ClaimRule("q", 10, lim), T0 + 1) == [jobs[1].id]  # A's slot is free again


async def test_task_and_tenant_keys_and_filters(store: Store) -> None:
    jobs = await enqueue(
        store,
        new("a", queue="q", tenant="t1"),
        new("a", queue="q", tenant="t2"),
        new("b", queue="q", tenant="t1"),
        new("b", queue="q", tenant="t1"),
    )
    by_task = ClaimRule("q", None, FlowLimits("q", concurrency=1, concurrency_key="task"))
    assert await _claim(store, by_task, limit=10) == [jobs[0].id, jobs[2].id]
    by_tenant = ClaimRule("q", None, FlowLimits("q", concurrency=2, concurrency_key="tenant"))
    assert await _claim(store, by_tenant, limit=10) == [jobs[1].id]  # t1 already runs 2
    other = await enqueue(store, new("c", queue="q", tenant="t3"), new("d", queue="q", tenant="t3"))
    only = ClaimRule("q", None, FlowLimits("q", rate=100), 100.0, tasks=("d",), tenant="t3")
    assert await _claim(store, only) == [other[1].id]


async def test_a_claim_of_delivered_ids_takes_only_those_under_the_limits(store: Store) -> None:
    # A broker's deliveries are claimed by id under the queue's rule (delivery/source.py).
    jobs = await enqueue(store, *[new(queue="q") for _ in range(6)])
    capped = ClaimRule("q", 2, None, ids=(jobs[4].id, jobs[1].id, jobs[3].id))
    assert await _claim(store, capped) == [jobs[1].id, jobs[3].id]  # claim order, up to the cap
    assert await _claim(store, capped) == []  # the cap counts running jobs; jobs[4] waits
    lim = FlowLimits("q", rate=1, burst=1)
    rated = ClaimRule("q", None, lim, 1.0, ids=(jobs[5].id, jobs[0].id))
    assert await _claim(store, rated) == [jobs[0].id]  # one token
    assert await _claim(store, rated) == []
    assert await _claim(store, ClaimRule("q", None, lim, 1.0, ids=())) == []
    left = await store.get_jobs([jobs[2].id, jobs[4].id, jobs[5].id])
    assert all(j.state is JobState.QUEUED for j in left)


async def test_flow_counts(store: Store) -> None:
    await enqueue(store, new(queue="a"), new(queue="a"), new(queue="b"), new(queue="b", run_at=T0 + 60))
    await _claim(store, ClaimRule("a", 1))
    counts = await _flow(store).flow_counts()
    assert counts.depth == {"a": 1, "b": 2}
    assert counts.running == {"a": 1}


@pytest.mark.parametrize("n_workers", [4])
async def test_concurrent_limited_claims_never_pass_the_limits(store: Store, n_workers: int) -> None:
    await enqueue(store, *[new(queue="q") for _ in range(40)])
    rule = ClaimRule("q", 3, FlowLimits("q", rate=1, burst=5), 1.0)

    async def worker(i: int) -> list[str]:
        return await _claim(store, rule, T0, limit=3, worker=f"w{i}")

    results = await asyncio.gather(*(worker(i) for i in range(n_workers)))
    got = [j for r in results for j in r]
    assert len(got) == len(set(got)) == 3  # the cap, whoever claimed
    counts = await _flow(store).flow_counts()
    assert counts.running == {"q": 3}
