"""What each store transition does to one job, as pure functions over :class:`Job`.

SQL stores express these rules as guarded UPDATEs; the contract suite's reference (``tests/contract/oracle.py``)
applies them directly and holds every store to the same behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from jobengine.core import events as ev
from jobengine.core.ids import LeaseToken, WorkerId
from jobengine.core.models import AttemptError, FailOutcome, Failure, Job, Json, NewEvent, NewJob, Phase, PhaseState
from jobengine.core.states import JobState, transition


def initial_state(new: NewJob, now: float, deps_done: bool) -> JobState:
    if not deps_done:
        return JobState.BLOCKED
    if new.run_at is not None and new.run_at > now:
        return JobState.SCHEDULED
    return JobState.QUEUED


def with_dependents(jobs: list[Job], batch: Sequence[NewJob]) -> list[Job]:
    """``jobs`` (an insert's result) with ``has_dependents`` set on those a job of ``batch`` depends on."""
    parents = {d for new in batch for d in new.depends_on}
    if not parents:
        return jobs
    return [replace(j, has_dependents=True) if j.id in parents and not j.has_dependents else j for j in jobs]


def ready_state(job: Job, now: float) -> JobState:
    return JobState.SCHEDULED if job.run_at > now else JobState.QUEUED


def start(job: Job, worker: WorkerId, token: LeaseToken, expires: float, now: float) -> tuple[Job, NewEvent]:
    phases = (
        tuple(p if p.state is PhaseState.SUCCEEDED else replace(p, state=PhaseState.PENDING) for p in job.phases)
        if any(p.state is PhaseState.RUNNING for p in job.phases)
        else job.phases
    )
    # A phase left RUNNING by a dead process keeps its checkpoint; only its state is reset.
    job = replace(
        job,
        state=transition(job.state, JobState.RUNNING),
        attempt=job.attempt + 1,
        lease_worker=worker,
        lease_token=token,
        lease_expires_at=expires,
        started_at=now,
        updated_at=now,
        phases=phases,
    )
    return job, ev.job_event(ev.STARTED, job, {"worker": worker})


def _clear_lease(job: Job) -> dict[str, object]:
    return {"lease_worker": None, "lease_token": None, "lease_expires_at": None}


def succeed(job: Job, result: Json, now: float) -> tuple[Job, NewEvent]:
    job = replace(
        job,
        state=transition(job.state, JobState.SUCCEEDED),
        result=result,
        progress=1.0,
        finished_at=now,
        updated_at=now,
        cancel_requested=False,
        **_clear_lease(job),  # type: ignore[arg-type]
    )
    return job, ev.job_event(ev.SUCCEEDED, job, {"duration": now - (job.started_at or now)})


def fail(
    job: Job, error: AttemptError, outcome: FailOutcome, retry_at: float | None, now: float
) -> tuple[Job, NewEvent]:
    errors = (*job.errors, error)
    common = {"errors": errors, "updated_at": now, "cancel_requested": False, **_clear_lease(job)}
    data: dict[str, Json] = {"error": error.message, "error_type": error.type}
    if outcome is FailOutcome.RETRY:
        assert retry_at is not None
        job = replace(job, state=transition(job.state, JobState.FAILED), run_at=retry_at, **common)  # type: ignore[arg-type]
        data["retry_at"] = retry_at
        return job, ev.job_event(ev.FAILED, job, data)
    if outcome is FailOutcome.DEAD:
        job = replace(
            job,
            state=transition(job.state, JobState.DEAD),
            finished_at=now,
            reason=error.message,
            **common,  # type: ignore[arg-type]
        )
        return job, ev.job_event(ev.DEAD, job, data)
    job = replace(
        job,
        state=transition(job.state, JobState.CANCELLED),
        finished_at=now,
        reason=job.reason or "cancelled",
        **common,  # type: ignore[arg-type]
    )
    return job, ev.job_event(ev.CANCELLED, job, {"reason": job.reason})


def lost_attempt(
    job: Job, now: float, error_type: str, message: str, only_if_expired_at: float | None = None
) -> Failure | None:
    """The failed attempt of a running job whose worker is gone (its lease expired, its process died): it
    runs again now, keeping its place in line (the worker failed, not the job's turn), or goes dead after its
    last attempt; a job whose cancel was requested ends cancelled. None: the job holds no lease."""
    if job.lease_token is None:
        return None
    error = AttemptError(job.attempt, now, error_type, message, None, job.lease_worker)
    if job.cancel_requested:  # the cancel it was asked for stands: a lost worker must not run it again
        outcome = FailOutcome.CANCELLED
    else:
        outcome = FailOutcome.RETRY if job.attempt < job.max_attempts else FailOutcome.DEAD
    return Failure(job.id, job.lease_token, error, outcome, min(now, job.run_at), only_if_expired_at)


def expired_failure(job: Job, now: float) -> Failure | None:
    """:func:`lost_attempt` of a job whose lease expired, as the rescuer records it (fenced: applied only
    if the lease is still expired)."""
    return lost_attempt(job, now, "LeaseExpired", f"lease of worker {job.lease_worker} expired", now)


def release(job: Job, now: float) -> tuple[Job, NewEvent]:
    """Back to queued without spending an attempt (graceful shutdown)."""
    job = replace(
        job,
        state=transition(job.state, JobState.QUEUED),
        attempt=max(0, job.attempt - 1),
        updated_at=now,
        **_clear_lease(job),  # type: ignore[arg-type]
    )
    return job, ev.job_event(ev.RELEASED, job)


def cancel(job: Job, reason: str, now: float) -> tuple[Job, NewEvent]:
    job = replace(
        job,
        state=transition(job.state, JobState.CANCELLED),
        reason=reason,
        finished_at=now,
        updated_at=now,
        **_clear_lease(job),  # type: ignore[arg-type]
    )
    return job, ev.job_event(ev.CANCELLED, job, {"reason": reason})


def unblock(job: Job, now: float) -> tuple[Job, NewEvent]:
    job = replace(job, state=transition(job.state, ready_state(job, now)), updated_at=now)
    return job, ev.job_event(ev.UNBLOCKED, job)


def retry_now(job: Job, now: float) -> tuple[Job, NewEvent]:
    """A manual retry: dead / cancelled / failed jobs queue again now with a fresh attempt budget."""
    previous = job.state
    job = replace(
        job,
        state=transition(job.state, JobState.QUEUED),
        attempt=0,
        run_at=now,
        finished_at=None,
        reason=None,
        cancel_requested=False,
        phases=tuple(
            p if p.state is PhaseState.SUCCEEDED else replace(p, state=PhaseState.PENDING) for p in job.phases
        ),
        updated_at=now,
    )
    return job, ev.job_event(ev.RETRIED, job, {"previous": previous.value})


def make_stale(job: Job, now: float) -> tuple[Job, NewEvent]:
    outcome = job.state
    job = replace(job, state=transition(job.state, JobState.STALE), outcome=outcome, updated_at=now)
    return job, ev.job_event(ev.STALE, job, {"outcome": outcome.value})


def phases_template(names: tuple[str, ...]) -> tuple[Phase, ...]:
    return tuple(Phase(name=n) for n in names)
