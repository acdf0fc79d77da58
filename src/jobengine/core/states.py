"""Job states and the one function that decides which transitions are legal.

blocked ──▶ queued / scheduled ──▶ running ──▶ succeeded
   │              │                  │  ├──▶ failed ──▶ running (retry, after run_at)
   │              │                  │  ├──▶ dead (attempts exhausted or non-retryable)
   ▼              ▼                  ▼  └──▶ queued (released on shutdown, no attempt spent)
cancelled ◀───────┴──────────────────┘
succeeded / dead / cancelled ──▶ stale (retention) ──▶ deleted
dead / cancelled / failed ──▶ queued (manual retry or replay)
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    BLOCKED = "blocked"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    STALE = "stale"


TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})
#: States a worker may claim once ``run_at`` has passed.
RUNNABLE: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.SCHEDULED, JobState.FAILED})
#: States of a job that is not finished: what ``count_jobs(finished=False)`` counts.
UNFINISHED: frozenset[JobState] = frozenset({JobState.BLOCKED, JobState.RUNNING}) | RUNNABLE
#: States that end a dependency chain: dependents of such a job are cancelled.
BREAKS_DEPENDENTS: frozenset[JobState] = frozenset({JobState.DEAD, JobState.CANCELLED})

_S = JobState
_ALLOWED: dict[JobState, frozenset[JobState]] = {
    _S.BLOCKED: frozenset({_S.QUEUED, _S.SCHEDULED, _S.CANCELLED}),
    _S.SCHEDULED: frozenset({_S.RUNNING, _S.CANCELLED, _S.QUEUED}),
    _S.QUEUED: frozenset({_S.RUNNING, _S.CANCELLED}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.DEAD, _S.CANCELLED, _S.QUEUED}),
    _S.FAILED: frozenset({_S.RUNNING, _S.CANCELLED, _S.QUEUED}),
    _S.SUCCEEDED: frozenset({_S.STALE}),
    _S.DEAD: frozenset({_S.STALE, _S.QUEUED}),
    _S.CANCELLED: frozenset({_S.STALE, _S.QUEUED}),
    _S.STALE: frozenset(),
}


class IllegalTransition(ValueError):
    def __init__(self, source: JobState, target: JobState) -> None:
        super().__init__(f"a job cannot go from {source.value!r} to {target.value!r}")
        self.source = source
        self.target = target


def transition(source: JobState, target: JobState) -> JobState:
    """Return ``target`` if ``source → target`` is legal, else raise :class:`IllegalTransition`."""
    if target not in _ALLOWED[source]:
        raise IllegalTransition(source, target)
    return target
