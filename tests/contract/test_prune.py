"""prune_jobs: terminal jobs become stale, stale jobs are deleted; nothing else is touched."""

from __future__ import annotations

from jobengine.core import events as ev
from jobengine.core.models import FailOutcome, NewJob
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import T0, claim, completion, enqueue, event_types, failure, get


async def _one_of_each(store: Store) -> dict[str, NewJob]:
    jobs = {
        "succeeded": NewJob(task="succeeded", queue="qs"),
        "dead": NewJob(task="dead", queue="qd", max_attempts=1),
        "cancelled": NewJob(task="cancelled", queue="qc"),
        "queued": NewJob(task="queued", queue="idle"),
        "scheduled": NewJob(task="scheduled", queue="idle", run_at=T0 + 10_000),
        "running": NewJob(task="running", queue="qr"),
        "failed": NewJob(task="failed", queue="qf"),
    }
    jobs["blocked"] = NewJob(task="blocked", queue="idle", depends_on=(jobs["running"].id,))
    await enqueue(store, *jobs.values())
    (s,) = await claim(store, T0, queues=["qs"])
    await store.complete_jobs([completion(s)], T0 + 1)
    (d,) = await claim(store, T0, queues=["qd"])
    await store.fail_jobs([failure(d, T0 + 1, FailOutcome.DEAD)], T0 + 1)
    await store.cancel_jobs([jobs["cancelled"].id], "x", T0 + 1)
    await claim(store, T0, queues=["qr"])
    (f,) = await claim(store, T0, queues=["qf"])
    await store.fail_jobs([failure(f, T0 + 1, retry_at=T0 + 10_000)], T0 + 1)
    return jobs


async def test_terminal_jobs_become_stale_then_are_deleted(store: Store) -> None:
    jobs = await _one_of_each(store)
    terminal = {jobs[k].id for k in ("succeeded", "dead", "cancelled")}

    assert (await store.prune_jobs(T0 + 1, T0 - 1, T0 + 100, 100)).staled == 0  # finished at T0+1: not before
    pruned = await store.prune_jobs(T0 + 2, T0 - 1, T0 + 100, 100)
    assert (pruned.staled, pruned.deleted) == (3, 0)
    assert {e.job_id for e in pruned.events} == terminal and {e.type for e in pruned.events} == {ev.STALE}
    for name in ("succeeded", "dead", "cancelled"):
        job = await get(store, jobs[name].id)
        assert job.state is JobState.STALE and job.outcome is JobState(name) and job.final_state is JobState(name)
        assert job.terminal and job.updated_at == T0 + 100 and job.finished_at == T0 + 1
        event = next(e for e in pruned.events if e.job_id == job.id)
        assert event.data == {"state": "stale", "attempt": job.attempt, "outcome": name}

    pruned = await store.prune_jobs(T0 + 200, T0 + 2, T0 + 200, 100)
    assert (pruned.staled, pruned.deleted) == (0, 3)
    assert {e.job_id for e in pruned.events} == terminal and {e.type for e in pruned.events} == {ev.DELETED}
    assert await store.get_jobs(list(terminal)) == []
    # The history outlives the job.
    assert await event_types(store, jobs["succeeded"].id) == [
        ev.ENQUEUED,
        ev.STARTED,
        ev.SUCCEEDED,
        ev.STALE,
        ev.DELETED,
    ]

    # Never a job that is not terminal, however old.
    for name in ("queued", "scheduled", "running", "failed", "blocked"):
        assert (await get(store, jobs[name].id)).state is JobState(name)
    nothing = await store.prune_jobs(T0 + 1_000_000, T0 + 1_000_000, T0 + 1_000_000, 100)
    assert (nothing.staled, nothing.deleted, nothing.events) == (0, 0, [])


async def test_a_job_is_not_made_stale_and_deleted_in_one_call(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"))
    await store.cancel_jobs([job.id], "x", T0)
    first = await store.prune_jobs(T0 + 10, T0 + 10, T0 + 10, 100)
    assert (first.staled, first.deleted) == (1, 0)
    second = await store.prune_jobs(T0 + 10, T0 + 10, T0 + 11, 100)
    assert (second.staled, second.deleted) == (0, 1)


async def test_prune_does_at_most_limit(store: Store) -> None:
    jobs = await enqueue(store, *[NewJob(task="t") for _ in range(5)])
    await store.cancel_jobs([j.id for j in jobs], "x", T0)
    first = await store.prune_jobs(T0 + 1, T0 - 1, T0 + 1, 3)
    assert (first.staled, first.deleted, len(first.events)) == (3, 0, 3)
    second = await store.prune_jobs(T0 + 1, T0 + 1, T0 + 2, 4)
    assert second.staled + second.deleted == 4 and second.deleted >= 1
    assert await store.prune_jobs(T0 + 1, T0 + 1, T0 + 3, 0) == type(first)(0, 0, [])
