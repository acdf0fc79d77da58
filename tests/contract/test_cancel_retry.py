"""cancel_jobs and retry_jobs: operator actions, tenant-scoped."""

from __future__ import annotations

from jobengine.core import events as ev
from jobengine.core.models import FailOutcome, NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.core.states import JobState
from jobengine.core.transitions import expired_failure
from jobengine.ports.store import Store

from .helpers import T0, claim, completion, enqueue, failure, get, token


async def test_cancel_of_jobs_not_yet_running_is_immediate(store: Store) -> None:
    queued, scheduled = await enqueue(store, NewJob(task="a"), NewJob(task="b", run_at=T0 + 100))
    result = await store.cancel_jobs([queued.id, scheduled.id], "not needed", T0 + 1)
    assert [j.id for j in result.jobs] == [queued.id, scheduled.id]
    for job in result.jobs:
        assert job.state is JobState.CANCELLED and job.reason == "not needed"
        assert job.finished_at == T0 + 1 and job.updated_at == T0 + 1
        assert await get(store, job.id) == job
    assert [e.type for e in result.events] == [ev.CANCELLED, ev.CANCELLED]
    assert result.events[0].data == {"state": "cancelled", "attempt": 0, "reason": "not needed"}
    assert await claim(store, T0 + 1000) == []


async def test_cancel_of_a_failed_job_waiting_to_retry_is_immediate(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    await store.fail_jobs([failure(running, T0 + 1, retry_at=T0 + 50)], T0 + 1)
    result = await store.cancel_jobs([running.id], "give up", T0 + 2)
    assert [j.state for j in result.jobs] == [JobState.CANCELLED]


async def test_cancel_of_a_running_job_only_flags_it(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    result = await store.cancel_jobs([running.id], "stop please", T0 + 1)
    (flagged,) = result.jobs
    assert flagged.state is JobState.RUNNING and flagged.cancel_requested is True
    assert flagged.reason == "stop please" and flagged.lease_token == running.lease_token
    assert [e.type for e in result.events] == [ev.CANCEL_REQUESTED]
    assert result.events[0].data == {"state": "running", "attempt": 1, "reason": "stop please"}
    assert await get(store, running.id) == flagged
    # Asked twice: nothing new to say.
    again = await store.cancel_jobs([running.id], "stop please", T0 + 2)
    assert (again.jobs, again.events) == ([], [])
    # The worker may still finish it: the flag does not take the lease away.
    done = await store.complete_jobs([completion(running)], T0 + 3)
    assert done.jobs[0].state is JobState.SUCCEEDED and done.jobs[0].cancel_requested is False


async def test_cancel_leaves_out_finished_and_unknown_jobs(store: Store) -> None:
    a, b = await enqueue(store, NewJob(task="a"), NewJob(task="b"))
    (ra,) = await claim(store, T0, limit=1)
    await store.complete_jobs([completion(ra)], T0 + 1)
    await store.cancel_jobs([b.id], "first", T0 + 1)
    result = await store.cancel_jobs([a.id, b.id, "0190f2c4-0000-7000-8000-000000000000"], "again", T0 + 2)  # type: ignore[list-item]
    assert (result.jobs, result.events) == ([], [])
    assert (await get(store, b.id)).reason == "first"


async def test_cancel_is_scoped_to_the_tenant(store: Store) -> None:
    mine, theirs = await enqueue(store, NewJob(task="t", tenant="me"), NewJob(task="t", tenant="them"))
    result = await store.cancel_jobs([mine.id, theirs.id], "x", T0 + 1, tenant="me")
    assert [j.id for j in result.jobs] == [mine.id]
    assert (await get(store, theirs.id)).state is JobState.QUEUED


async def test_retry_requeues_a_dead_job_now_with_a_fresh_budget(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", max_attempts=1), phases=[("a", "b")])
    (running,) = await claim(store, T0)
    phases = (Phase("a", PhaseState.SUCCEEDED, 1.0, result="A"), Phase("b", PhaseState.FAILED, 0.3))
    await store.save_phases([PhaseUpdate(job.id, token(running), phases)], T0 + 1)
    await store.fail_jobs([failure(running, T0 + 2, FailOutcome.DEAD, message="bad")], T0 + 2)

    result = await store.retry_jobs([job.id], T0 + 10)
    (retried,) = result.jobs
    assert retried.state is JobState.QUEUED and retried.attempt == 0 and retried.run_at == T0 + 10
    assert retried.reason is None and retried.finished_at is None and retried.cancel_requested is False
    assert [e.message for e in retried.errors] == ["bad"]  # history is kept
    assert [p.state for p in retried.phases] == [PhaseState.SUCCEEDED, PhaseState.PENDING]
    assert retried.phases[0].result == "A"
    assert [e.type for e in result.events] == [ev.RETRIED]
    assert result.events[0].data == {"state": "queued", "attempt": 0, "previous": "dead"}
    assert await get(store, job.id) == retried
    (again,) = await claim(store, T0 + 10)
    assert again.attempt == 1


async def test_retry_of_cancelled_and_failed_jobs(store: Store) -> None:
    a, b = await enqueue(store, NewJob(task="a"), NewJob(task="b", queue="other"))
    await store.cancel_jobs([a.id], "x", T0)
    (rb,) = await claim(store, T0, queues=["other"])
    await store.fail_jobs([failure(rb, T0 + 1, retry_at=T0 + 500)], T0 + 1)
    result = await store.retry_jobs([a.id, b.id], T0 + 2)
    assert [(j.id, j.state, j.run_at) for j in result.jobs] == [
        (a.id, JobState.QUEUED, T0 + 2),
        (b.id, JobState.QUEUED, T0 + 2),
    ]
    assert [e.data["previous"] for e in result.events] == ["cancelled", "failed"]


async def test_retry_leaves_out_jobs_it_does_not_apply_to(store: Store) -> None:
    queued, running, done = await enqueue(store, NewJob(task="q", queue="idle"), NewJob(task="r"), NewJob(task="d"))
    claimed = await claim(store, T0)
    await store.complete_jobs([completion(j) for j in claimed if j.id == done.id], T0 + 1)
    result = await store.retry_jobs([queued.id, running.id, done.id], T0 + 2)
    assert (result.jobs, result.events) == ([], [])


async def test_retry_is_scoped_to_the_tenant(store: Store) -> None:
    mine, theirs = await enqueue(store, NewJob(task="t", tenant="me"), NewJob(task="t", tenant="them"))
    await store.cancel_jobs([mine.id, theirs.id], "x", T0)
    result = await store.retry_jobs([mine.id, theirs.id], T0 + 1, tenant="them")
    assert [j.id for j in result.jobs] == [theirs.id]
    assert (await get(store, mine.id)).state is JobState.CANCELLED


async def test_a_running_job_asked_to_cancel_ends_cancelled_when_its_worker_is_lost(store: Store) -> None:
    await enqueue(store, NewJob(task="t", max_attempts=3))
    (running,) = await claim(store, T0)  # lease until T0 + 30
    (flagged,) = (await store.cancel_jobs([running.id], "stop please", T0 + 1)).jobs
    lost = expired_failure(flagged, T0 + 31)
    assert lost is not None
    (rescued,) = (await store.fail_jobs([lost], T0 + 31)).jobs
    assert rescued.state is JobState.CANCELLED and rescued.lease_token is None
    assert await claim(store, T0 + 40) == []  # not run again by another worker
