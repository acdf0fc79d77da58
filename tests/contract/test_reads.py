"""get_jobs, list_jobs, count_jobs, next_run_at: what the API and dashboard read."""

from __future__ import annotations

from typing import cast

from jobengine.core.ids import JobId
from jobengine.core.models import JobFilter, NewJob
from jobengine.core.states import UNFINISHED, JobState
from jobengine.ports.outbox import OutboxStore
from jobengine.ports.store import Store

from .helpers import T0, claim, completion, enqueue, failure

MISSING = JobId("0190f2c4-0000-7000-8000-000000000000")


async def test_get_jobs_returns_them_in_the_order_asked_without_unknown_ones(store: Store) -> None:
    a, _, c = await enqueue(store, NewJob(task="a"), NewJob(task="b"), NewJob(task="c"))
    assert [j.id for j in await store.get_jobs([c.id, MISSING, a.id])] == [c.id, a.id]
    assert await store.get_jobs([]) == []


async def test_get_jobs_is_scoped_to_the_tenant(store: Store) -> None:
    mine, theirs = await enqueue(store, NewJob(task="t", tenant="me"), NewJob(task="t", tenant="them"))
    assert [j.id for j in await store.get_jobs([mine.id, theirs.id], tenant="me")] == [mine.id]
    assert await store.get_jobs([theirs.id], tenant="me") == []
    assert len(await store.get_jobs([mine.id, theirs.id])) == 2


async def test_list_jobs_is_newest_first_and_pages_with_before_id(store: Store) -> None:
    jobs = await enqueue(store, *[NewJob(task="t") for _ in range(7)])
    newest_first = [j.id for j in reversed(jobs)]
    page1 = await store.list_jobs(JobFilter(limit=3))
    page2 = await store.list_jobs(JobFilter(limit=3, before_id=page1[-1].id))
    page3 = await store.list_jobs(JobFilter(limit=3, before_id=page2[-1].id))
    assert [j.id for j in page1 + page2 + page3] == newest_first
    assert await store.list_jobs(JobFilter(before_id=page3[-1].id)) == []
    assert page1[0] == jobs[-1]


async def test_list_jobs_filters(store: Store) -> None:
    jobs = await enqueue(
        store,
        NewJob(task="mail", queue="q1", tenant="a"),
        NewJob(task="mail", queue="q2", tenant="a"),
        NewJob(task="sms", queue="q1", tenant="b"),
        NewJob(task="sms", queue="q1", tenant="a", run_at=T0 + 100),
    )
    (running,) = await claim(store, T0, queues=["q2"])

    async def ids(**kw: object) -> list[JobId]:
        return [j.id for j in await store.list_jobs(JobFilter(**kw))]  # type: ignore[arg-type]

    assert await ids(tenant="a") == [jobs[3].id, jobs[1].id, jobs[0].id]
    assert await ids(queue="q1") == [jobs[3].id, jobs[2].id, jobs[0].id]
    assert await ids(task="sms") == [jobs[3].id, jobs[2].id]
    assert await ids(states=(JobState.RUNNING,)) == [running.id]
    assert await ids(states=(JobState.QUEUED, JobState.SCHEDULED), tenant="a") == [jobs[3].id, jobs[0].id]
    assert await ids(tenant="a", queue="q1", task="mail", states=(JobState.QUEUED,)) == [jobs[0].id]
    assert await ids(tenant="nobody") == []


async def test_count_jobs_by_queue_and_state(store: Store) -> None:
    await enqueue(
        store,
        NewJob(task="t", queue="q1", tenant="a"),
        NewJob(task="t", queue="q1", tenant="a"),
        NewJob(task="t", queue="q1", tenant="b", run_at=T0 + 5),
        NewJob(task="t", queue="q2", tenant="b"),
    )
    (running,) = await claim(store, T0, queues=["q2"])
    await store.complete_jobs([completion(running)], T0 + 1)
    assert await store.count_jobs() == {
        ("q1", JobState.QUEUED): 2,
        ("q1", JobState.SCHEDULED): 1,
        ("q2", JobState.SUCCEEDED): 1,
    }
    assert await store.count_jobs(tenant="b") == {("q1", JobState.SCHEDULED): 1, ("q2", JobState.SUCCEEDED): 1}
    assert await store.count_jobs(tenant="nobody") == {}


async def test_count_jobs_of_unfinished_jobs_leaves_every_finished_state_out(store: Store) -> None:
    parent, _, _, doomed, _, _ = await enqueue(
        store,
        NewJob(task="t", queue="q1", tenant="a"),
        NewJob(task="t", queue="q1", tenant="a"),
        NewJob(task="t", queue="q2", tenant="b", run_at=T0 + 5),
        NewJob(task="t", queue="q3", tenant="b"),
        NewJob(task="t", queue="q4", tenant="a"),
        NewJob(task="t", queue="q5", tenant="a", max_attempts=2),
    )
    (child,) = await enqueue(store, NewJob(task="t", queue="q1", tenant="a", depends_on=(parent.id,)))
    assert child.state is JobState.BLOCKED
    (done,) = await claim(store, T0, queues=["q4"])
    await store.complete_jobs([completion(done)], T0 + 1)
    (failing,) = await claim(store, T0, queues=["q5"])
    await store.fail_jobs([failure(failing, T0 + 1)], T0 + 1)  # to run again: failed, not finished
    await store.cancel_jobs([doomed.id], "no", T0 + 1)
    await claim(store, T0 + 1, queues=["q1"], limit=1)
    everything = await store.count_jobs()
    assert everything[("q4", JobState.SUCCEEDED)] == 1 and everything[("q3", JobState.CANCELLED)] == 1
    assert await store.count_jobs(finished=False) == {
        ("q1", JobState.RUNNING): 1,
        ("q1", JobState.QUEUED): 1,
        ("q1", JobState.BLOCKED): 1,
        ("q2", JobState.SCHEDULED): 1,
        ("q5", JobState.FAILED): 1,
    }
    assert {state for _, state in everything} - UNFINISHED == {JobState.SUCCEEDED, JobState.CANCELLED}
    assert await store.count_jobs(tenant="b", finished=False) == {("q2", JobState.SCHEDULED): 1}


async def test_next_run_at_is_the_earliest_runnable_run_at(store: Store) -> None:
    assert await store.next_run_at(["default"]) is None
    parent = NewJob(task="p", queue="busy")
    await enqueue(
        store,
        parent,
        NewJob(task="t", run_at=T0 + 30),
        NewJob(task="t", run_at=T0 + 20),
        NewJob(task="t", queue="other", run_at=T0 + 5),
        NewJob(task="blocked", run_at=T0 + 1, depends_on=(parent.id,)),
    )
    assert await store.next_run_at(["default"]) == T0 + 20
    assert await store.next_run_at(["default", "other"]) == T0 + 5
    assert await store.next_run_at(["busy"]) == T0
    await claim(store, T0, queues=["busy"])  # running jobs are not runnable
    assert await store.next_run_at(["busy"]) is None
    assert await store.next_run_at([]) is None


async def test_overdue_jobs_are_runnable_ones_oldest_first_and_page_past_a_run_at_and_id(store: Store) -> None:
    outbox = cast(OutboxStore, store)
    same = await enqueue(store, *[NewJob(task="t") for _ in range(4)])  # one run_at: the id orders them
    late = await enqueue(store, NewJob(task="t", run_at=T0 + 10))
    later = await enqueue(store, NewJob(task="t", run_at=T0 + 100))
    await claim(store, limit=1)
    claimed = {j.id for j in same + late + later if (await store.get_jobs([j.id]))[0].state is JobState.RUNNING}
    expected = [j.id for j in sorted(same, key=lambda j: j.id) + late if j.id not in claimed]
    assert len(claimed) == 1
    first = await outbox.overdue_jobs(T0 + 50, 2)
    rest = await outbox.overdue_jobs(T0 + 50, 2, (first[-1].run_at, first[-1].id))
    assert [j.id for j in first + rest] == expected  # three of one run_at (one claimed), then the later one
    assert await outbox.overdue_jobs(T0 + 50, 2, (rest[-1].run_at, rest[-1].id)) == []
