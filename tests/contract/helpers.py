"""Small builders shared by the contract tests; every store call takes ``now`` explicitly."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import AttemptError, Completion, Event, FailOutcome, Failure, Job, Json, NewJob
from jobengine.ports.store import Store

T0 = 1_700_000_000.0
LEASE = 30.0


def new(task: str = "demo.task", **fields: object) -> NewJob:
    return NewJob(task=task, **fields)  # type: ignore[arg-type]


async def enqueue(store: Store, *jobs: NewJob, now: float = T0, phases: Sequence[tuple[str, ...]] = ()) -> list[Job]:
    names = list(phases) or [()] * len(jobs)
    inserted = await store.insert_jobs(list(jobs), now, names)
    return inserted.jobs


async def claim(
    store: Store,
    now: float = T0,
    *,
    limit: int = 100,
    queues: Sequence[str] = ("default",),
    worker: str = "w1",
    lease: float = LEASE,
) -> list[Job]:
    changed = await store.fetch_jobs(list(queues), limit, WorkerId(worker), lease, now)
    return changed.jobs


async def get(store: Store, job_id: JobId) -> Job:
    jobs = await store.get_jobs([job_id])
    assert len(jobs) == 1, f"job {job_id} not found"
    return jobs[0]


def token(job: Job) -> LeaseToken:
    assert job.lease_token is not None, f"job {job.id} holds no lease"
    return job.lease_token


def completion(job: Job, result: Json = None) -> Completion:
    return Completion(job.id, token(job), result)


def error(job: Job, at: float, message: str = "boom", type_: str = "ValueError") -> AttemptError:
    return AttemptError(attempt=job.attempt, at=at, type=type_, message=message, traceback="tb", worker="w1")


def failure(
    job: Job,
    at: float,
    outcome: FailOutcome = FailOutcome.RETRY,
    *,
    retry_at: float | None = None,
    message: str = "boom",
    only_if_expired_at: float | None = None,
) -> Failure:
    if outcome is FailOutcome.RETRY and retry_at is None:
        retry_at = at + 10
    return Failure(job.id, token(job), error(job, at, message), outcome, retry_at, only_if_expired_at)


async def event_types(store: Store, job_id: JobId) -> list[str]:
    return [e.type for e in await store.list_events(0, 1000, job_id=job_id)]


async def all_events(store: Store) -> list[Event]:
    return await store.list_events(0, 100_000)


async def run_to_success(store: Store, job: Job, now: float, result: Json = None) -> Job:
    """Claim ``job`` (it must be the only runnable one in its queue) and complete it."""
    (running,) = [j for j in await claim(store, now, queues=[job.queue]) if j.id == job.id]
    done = await store.complete_jobs([completion(running, result)], now)
    return done.jobs[0]
