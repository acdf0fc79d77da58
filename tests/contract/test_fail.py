"""fail_jobs: retry later, dead-letter, or cancelled, with every attempt's error kept."""

from __future__ import annotations

from jobengine.core import events as ev
from jobengine.core.models import AttemptError, FailOutcome, Failure, NewJob
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import T0, claim, enqueue, error, failure, get, token


async def test_a_retryable_failure_waits_for_retry_at_and_keeps_the_error(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", max_attempts=3))
    (running,) = await claim(store, T0)
    attempt_error = AttemptError(1, T0 + 1, "KeyError", "no key 'x'", traceback="Traceback...", worker="w1")
    result = await store.fail_jobs(
        [Failure(job.id, token(running), attempt_error, FailOutcome.RETRY, retry_at=T0 + 20)], T0 + 1
    )
    (failed,) = result.jobs
    assert failed.state is JobState.FAILED and failed.run_at == T0 + 20
    assert failed.errors == (attempt_error,)
    assert (failed.lease_worker, failed.lease_token, failed.lease_expires_at) == (None, None, None)
    assert failed.finished_at is None and failed.attempt == 1 and failed.updated_at == T0 + 1
    (event,) = result.events
    assert event.type == ev.FAILED
    assert event.data == {
        "state": "failed",
        "attempt": 1,
        "error": "no key 'x'",
        "error_type": "KeyError",
        "retry_at": T0 + 20,
    }
    assert await get(store, job.id) == failed


async def test_errors_accumulate_across_attempts_until_dead(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", max_attempts=2))
    (first,) = await claim(store, T0)
    await store.fail_jobs([failure(first, T0 + 1, retry_at=T0 + 2, message="first")], T0 + 1)
    (second,) = await claim(store, T0 + 2)
    assert second.attempt == 2 and [e.message for e in second.errors] == ["first"]
    result = await store.fail_jobs([failure(second, T0 + 3, FailOutcome.DEAD, message="second")], T0 + 3)
    (dead,) = result.jobs
    assert dead.state is JobState.DEAD and dead.finished_at == T0 + 3 and dead.reason == "second"
    assert [(e.attempt, e.message) for e in dead.errors] == [(1, "first"), (2, "second")]
    assert [e.type for e in result.events] == [ev.DEAD]
    assert result.events[0].data == {"state": "dead", "attempt": 2, "error": "second", "error_type": "ValueError"}
    assert await get(store, job.id) == dead
    assert await claim(store, T0 + 1000) == []


async def test_a_failure_with_outcome_cancelled_ends_the_job_cancelled(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    result = await store.fail_jobs([failure(running, T0 + 1, FailOutcome.CANCELLED)], T0 + 1)
    (cancelled,) = result.jobs
    assert cancelled.state is JobState.CANCELLED and cancelled.reason == "cancelled"
    assert cancelled.finished_at == T0 + 1 and len(cancelled.errors) == 1
    assert [e.type for e in result.events] == [ev.CANCELLED]
    assert result.events[0].data["reason"] == "cancelled"


async def test_a_cancel_request_reason_is_kept_when_the_worker_stops(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    await store.cancel_jobs([running.id], "operator said stop", T0 + 1)
    result = await store.fail_jobs([failure(running, T0 + 2, FailOutcome.CANCELLED)], T0 + 2)
    (cancelled,) = result.jobs
    assert cancelled.reason == "operator said stop" and cancelled.cancel_requested is False


async def test_fail_is_fenced(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    stale = Failure(job.id, token(running)[::-1], error(running, T0 + 1), FailOutcome.DEAD)
    assert (await store.fail_jobs([stale], T0 + 1)).jobs == []
    assert await get(store, job.id) == running
    # A failure and a second one for the same attempt in one batch: only the first applies.
    result = await store.fail_jobs(
        [failure(running, T0 + 2, retry_at=T0 + 3), failure(running, T0 + 2, FailOutcome.DEAD)], T0 + 2
    )
    assert [j.state for j in result.jobs] == [JobState.FAILED]
