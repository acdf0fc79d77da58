"""fetch_jobs: the claim order, what is runnable, and that each job is claimed once."""

from __future__ import annotations

import asyncio

from jobengine.core import events as ev
from jobengine.core.ids import WorkerId
from jobengine.core.models import NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import LEASE, T0, claim, completion, enqueue, failure, get, token


async def test_claims_in_priority_then_run_at_then_id_order(store: Store) -> None:
    jobs = [
        NewJob(task="low", priority=-5, run_at=T0 - 100),
        NewJob(task="late", priority=10, run_at=T0 - 1),
        NewJob(task="early", priority=10, run_at=T0 - 50),
        NewJob(task="mid-first", priority=0, run_at=T0 - 10),
        NewJob(task="mid-second", priority=0, run_at=T0 - 10),
        NewJob(task="top", priority=100, run_at=T0),
    ]
    await enqueue(store, *jobs, now=T0 - 200)
    claimed = await claim(store, T0)
    assert [j.task for j in claimed] == ["top", "early", "late", "mid-first", "mid-second", "low"]


async def test_the_order_holds_across_several_small_fetches(store: Store) -> None:
    batch = [NewJob(task=f"t{i}", priority=i % 4) for i in range(40)]
    await enqueue(store, *batch)
    expected = sorted(batch, key=lambda n: (-n.priority, n.id))
    seen = []
    while chunk := await claim(store, T0, limit=7):
        seen.extend(chunk)
    assert [j.id for j in seen] == [n.id for n in expected]


async def test_a_job_whose_run_at_is_ahead_is_not_claimed_until_then(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", run_at=T0 + 60))
    assert job.state is JobState.SCHEDULED
    assert await claim(store, T0 + 59.9) == []
    (claimed,) = await claim(store, T0 + 60)
    assert claimed.id == job.id and claimed.state is JobState.RUNNING


async def test_only_the_named_queues_are_claimed(store: Store) -> None:
    a, b, c = await enqueue(store, NewJob(task="a", queue="qa"), NewJob(task="b", queue="qb"), NewJob(task="c"))
    assert [j.id for j in await claim(store, T0, queues=["qb"])] == [b.id]
    assert sorted(j.id for j in await claim(store, T0, queues=["qa", "default", "nothing"])) == sorted([a.id, c.id])
    assert await claim(store, T0, queues=["qa", "qb", "default"]) == []
    assert await claim(store, T0, queues=[]) == []


async def test_a_claim_takes_only_the_named_tasks_and_tenant(store: Store) -> None:
    jobs = await enqueue(
        store,
        NewJob(task="a", tenant="acme", priority=1),
        NewJob(task="b", tenant="acme", priority=5),
        NewJob(task="a", tenant="globex", priority=9),
        NewJob(task="c", tenant="acme", queue="other"),
    )
    changed = await store.fetch_jobs(["default", "other"], 10, WorkerId("w"), LEASE, T0, tasks=["a"], tenant="acme")
    assert [j.id for j in changed.jobs] == [jobs[0].id]
    assert changed.jobs[0].state is JobState.RUNNING and changed.jobs[0].lease_token
    assert [e.type for e in changed.events] == [ev.STARTED]
    both = await store.fetch_jobs(["default", "other"], 10, WorkerId("w"), LEASE, T0, tasks=["b", "c"])
    assert sorted(j.task for j in both.jobs) == ["b", "c"]
    anyone = await store.fetch_jobs(["default"], 10, WorkerId("w"), LEASE, T0, tenant="globex")
    assert [j.id for j in anyone.jobs] == [jobs[2].id]
    assert (await store.fetch_jobs(["default"], 10, WorkerId("w"), LEASE, T0, tasks=[])).jobs == []


async def test_a_worker_passes_over_jobs_of_tasks_it_lacks_in_one_queue_and_in_several(store: Store) -> None:
    # Jobs of a task the worker lacks come first in claim order; it must still reach its own behind them.
    await enqueue(store, *[NewJob(task="new", priority=9) for _ in range(5)], NewJob(task="old"))
    await enqueue(store, NewJob(task="new", queue="q2", priority=9), NewJob(task="old", queue="q2"))
    one = await store.fetch_jobs(["default"], 3, WorkerId("w"), LEASE, T0, tasks=["old"])
    assert [j.task for j in one.jobs] == ["old"]
    many = await store.fetch_jobs(["default", "q2"], 3, WorkerId("w"), LEASE, T0, tasks=["old"])
    assert [(j.queue, j.task) for j in many.jobs] == [("q2", "old")]
    left = await store.fetch_jobs(["default", "q2"], 10, WorkerId("w"), LEASE, T0, tasks=["old"])
    assert left.jobs == []
    assert await store.next_run_at(["default", "q2"], ["old"]) is None
    assert await store.next_run_at(["default", "q2"], ["new"]) is not None
    assert await store.next_run_at(["default", "q2"]) is not None


async def test_limit_caps_the_claim(store: Store) -> None:
    await enqueue(store, *[NewJob(task="t") for _ in range(5)])
    assert len(await claim(store, T0, limit=3)) == 3
    assert await claim(store, T0, limit=0) == []
    assert len(await claim(store, T0, limit=10)) == 2


async def test_a_claim_starts_the_job_under_a_fresh_lease(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", tenant="acme"))
    changed = await store.fetch_jobs(["default"], 10, WorkerId("worker-7"), 45.0, T0 + 1)
    (running,) = changed.jobs
    assert running.state is JobState.RUNNING
    assert running.attempt == 1
    assert running.lease_worker == "worker-7"
    assert running.lease_token and len(running.lease_token) >= 16
    assert running.lease_expires_at == T0 + 46
    assert running.started_at == T0 + 1 and running.updated_at == T0 + 1
    (event,) = changed.events
    assert (event.type, event.job_id, event.tenant, event.queue, event.task) == (
        ev.STARTED,
        job.id,
        "acme",
        "default",
        "t",
    )
    assert event.data == {"state": "running", "attempt": 1, "worker": "worker-7"}
    assert await get(store, job.id) == running


async def test_running_and_finished_jobs_are_not_claimed(store: Store) -> None:
    await enqueue(store, NewJob(task="a"), NewJob(task="b"))
    first = await claim(store, T0, limit=1)
    (second,) = await claim(store, T0)
    await store.complete_jobs([completion(second)], T0 + 1)
    assert await claim(store, T0 + 1000) == []
    assert first[0].id != second.id


async def test_a_failed_job_is_claimed_again_at_its_retry_time_with_a_new_token(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (first,) = await claim(store, T0)
    await store.fail_jobs([failure(first, T0 + 1, retry_at=T0 + 10)], T0 + 1)
    assert await claim(store, T0 + 9) == []
    (second,) = await claim(store, T0 + 10)
    assert second.attempt == 2 and token(second) != token(first)


async def test_concurrent_fetches_claim_each_job_once(store: Store) -> None:
    batch = [NewJob(task="t", priority=i % 5) for i in range(200)]
    await enqueue(store, *batch)
    results = await asyncio.gather(
        *(store.fetch_jobs(["default"], 15, WorkerId(f"w{i}"), LEASE, T0) for i in range(20))
    )
    claimed = [j.id for r in results for j in r.jobs]
    assert len(claimed) == len(set(claimed)) == 200
    tokens = [j.lease_token for r in results for j in r.jobs]
    assert len(set(tokens)) == 200


async def test_a_phase_left_running_restarts_pending_with_its_checkpoint(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"), phases=[("a", "b", "c")])
    (running,) = await claim(store, T0)
    phases = (
        Phase("a", PhaseState.SUCCEEDED, 1.0, result=1),
        Phase("b", PhaseState.RUNNING, 0.5, checkpoint={"offset": 50}),
        Phase("c", PhaseState.FAILED, 0.2),
    )
    await store.save_phases([PhaseUpdate(job.id, token(running), phases)], T0 + 1)
    # The worker died: its lease expires and the rescuer fails the attempt.
    await store.fail_jobs([failure(running, T0 + 40, retry_at=T0 + 40, only_if_expired_at=T0 + 40)], T0 + 40)
    (again,) = await claim(store, T0 + 40)
    assert [p.state for p in again.phases] == [PhaseState.SUCCEEDED, PhaseState.PENDING, PhaseState.PENDING]
    assert again.phases[1].checkpoint == {"offset": 50} and again.phases[0].result == 1
    assert await get(store, job.id) == again


async def test_phases_are_kept_as_they_are_when_none_was_left_running(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"), phases=[("a", "b")])
    (running,) = await claim(store, T0)
    phases = (Phase("a", PhaseState.SUCCEEDED, 1.0), Phase("b", PhaseState.FAILED, 0.4, message="bad input"))
    await store.save_phases([PhaseUpdate(job.id, token(running), phases)], T0 + 1)
    await store.fail_jobs([failure(running, T0 + 2, retry_at=T0 + 2)], T0 + 2)
    (again,) = await claim(store, T0 + 2)
    assert again.phases == phases
