"""Runs: one firing of a schedule (or a manual trigger, or a retry), the jobs it owns, and the summary it
keeps as they end. Pure: stores apply :func:`apply_outcome` and persist what it returns.

States::

    planning ──▶ queued ──▶ running ──▶ completed / error / cancelled
        │           └──────────────────▶ (every job ended)
        └─▶ queued (a run that waited for the previous one: overlap ``queue``)
    any unfinished state ──▶ cancelled (by hand)    planning ──▶ error (the planner failed)

A run without jobs (the planner found no items) is born ``completed`` with ``no_work``. When its last
job ends a run becomes ``error`` if a job ended dead, ``cancelled`` if every job was cancelled, else
``completed``. A job of an ended run that is retried by hand reopens it (back to ``running``), unless
it was cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from jobengine.core.ids import JobId, RunId, ScheduleId
from jobengine.core.models import Json, NewEvent
from jobengine.core.states import JobState

RUN_CREATED: Final = "run.created"
RUN_PLANNED: Final = "run.planned"  # a run that waited for its turn got its jobs
RUN_STARTED: Final = "run.started"
RUN_COMPLETED: Final = "run.completed"
RUN_ERROR: Final = "run.error"
RUN_CANCELLED: Final = "run.cancelled"
RUN_REOPENED: Final = "run.reopened"


class RunState(StrEnum):
    PLANNING = "planning"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    ERROR = "error"


ENDED_RUN_STATES: Final = frozenset({RunState.COMPLETED, RunState.CANCELLED, RunState.ERROR})


class RunTrigger(StrEnum):
    SCHEDULE = "schedule"  # a tick
    MANUAL = "manual"  # triggered by hand, with a reason
    RETRY = "retry"  # the failed segments of an earlier run
    REQUEST = "request"  # a run request: a task over inputs, no schedule (core.run_requests)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Counts of the run's jobs by outcome and their durations (seconds from start to end of the last
    attempt), kept by deltas as jobs end."""

    total: int = 0
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    duration_total: float = 0.0
    duration_max: float = 0.0

    @property
    def ended(self) -> int:
        return self.succeeded + self.dead + self.cancelled

    @property
    def pending(self) -> int:
        return self.total - self.ended

    def to_json(self) -> dict[str, Json]:
        return {
            "total": self.total,
            "succeeded": self.succeeded,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "pending": self.pending,
            "duration_total": self.duration_total,
            "duration_max": self.duration_max,
        }


@dataclass(frozen=True, slots=True)
class Run:
    id: RunId
    schedule_id: ScheduleId
    tenant: str
    state: RunState
    trigger: RunTrigger
    created_at: float
    updated_at: float
    tick: float | None = None  # the tick that fired it (None: manual or retry)
    reason: str | None = None  # why it was triggered, cancelled, or failed to plan
    actor: str | None = None  # who triggered it by hand (None: the scheduler); who cancelled is in the audit log
    parent_id: RunId | None = None  # the run a retry repeats
    no_work: bool = False
    items: int = 0  # items planned over all segments
    summary: RunSummary = RunSummary()
    fired_by: str | None = None  # the scheduler instance that fired the tick
    started_at: float | None = None
    finished_at: float | None = None
    #: JSON that came with the trigger (an inbound hook's event), None otherwise. Stored apart from the
    #: columns the job paths read and rewrite, so only reads of one run (``get_runs``) return it.
    trigger_data: Json = None
    #: The mode of the run request that made it (``core.run_modes``: full, incremental, simulate); None
    #: for a run no request made.
    mode: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_RUN_STATES


@dataclass(frozen=True, slots=True)
class Segment:
    """One job of a run: its share of the items and, once it ended, its outcome."""

    run_id: RunId
    job_id: JobId
    index: int
    items: int
    outcome: JobState | None = None  # succeeded / dead / cancelled
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A run job that ended (``outcome`` terminal) or was queued again by hand (``outcome`` None)."""

    job_id: JobId
    run_id: RunId
    outcome: JobState | None
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    tenant: str | None = None
    schedule_id: ScheduleId | None = None
    states: tuple[RunState, ...] = ()
    trigger: RunTrigger | None = None
    created_after: float | None = None
    created_before: float | None = None
    limit: int = 100
    before_id: RunId | None = None  # newest first; page with the last id seen
    mode: str | None = None  # runs of requests in this mode only (full, incremental, simulate)


def run_event(type_: str, run: Run, **extra: Json) -> NewEvent:
    data: dict[str, Json] = {
        "run_id": run.id,
        "schedule_id": run.schedule_id,
        "state": run.state.value,
        "trigger": run.trigger.value,
        "summary": run.summary.to_json(),
    }
    if run.tick is not None:
        data["tick"] = run.tick
    if run.actor is not None:
        data["actor"] = run.actor
    if run.reason is not None:
        data["reason"] = run.reason
    data.update(extra)
    return NewEvent(type=type_, tenant=run.tenant, job_id=None, queue=None, task=None, data=data)


def final_state(summary: RunSummary) -> RunState:
    if summary.dead:
        return RunState.ERROR
    if summary.total and summary.cancelled == summary.total:
        return RunState.CANCELLED
    return RunState.COMPLETED


_END_EVENTS: Final = {
    RunState.COMPLETED: RUN_COMPLETED,
    RunState.ERROR: RUN_ERROR,
    RunState.CANCELLED: RUN_CANCELLED,
}


def _count(summary: RunSummary, outcome: JobState, sign: int) -> RunSummary:
    if outcome is JobState.SUCCEEDED:
        return replace(summary, succeeded=summary.succeeded + sign)
    if outcome is JobState.DEAD:
        return replace(summary, dead=summary.dead + sign)
    if outcome is JobState.CANCELLED:
        return replace(summary, cancelled=summary.cancelled + sign)
    return summary


def apply_outcome(
    run: Run, segment: Segment, outcome: JobState | None, duration: float | None, now: float
) -> tuple[Run, Segment, list[NewEvent]]:
    """The run and segment after ``segment``'s job ended as ``outcome`` (None: queued again by hand).

    A delta: the segment's previous outcome is taken out of the counts before the new one goes in, so
    reporting the same outcome twice changes nothing. Durations only grow (a retried job's earlier time
    was spent too).
    """
    if outcome == segment.outcome:
        return run, segment, []
    summary = run.summary
    if segment.outcome is not None:
        summary = _count(summary, segment.outcome, -1)
    if outcome is not None:
        summary = _count(summary, outcome, +1)
        if duration is not None:
            summary = replace(
                summary,
                duration_total=summary.duration_total + duration,
                duration_max=max(summary.duration_max, duration),
            )
    segment = replace(segment, outcome=outcome, duration=duration if outcome is not None else None)
    events: list[NewEvent] = []
    run = replace(run, summary=summary, updated_at=now)
    if outcome is None:
        if run.state in (RunState.COMPLETED, RunState.ERROR):
            run = replace(run, state=RunState.RUNNING, finished_at=None)
            events.append(run_event(RUN_REOPENED, run))
        return run, segment, events
    if run.state in (RunState.QUEUED, RunState.PLANNING):
        run = replace(run, state=RunState.RUNNING, started_at=run.started_at or now)
        events.append(run_event(RUN_STARTED, run))
    if run.state is RunState.RUNNING and summary.pending <= 0:
        run = replace(run, state=final_state(summary), finished_at=now)
        events.append(run_event(_END_EVENTS[run.state], run))
    return run, segment, events


def start(run: Run, now: float) -> tuple[Run, list[NewEvent]]:
    """queued -> running (its first job started); anything else is left as it is."""
    if run.state is not RunState.QUEUED:
        return run, []
    run = replace(run, state=RunState.RUNNING, started_at=now, updated_at=now)
    return run, [run_event(RUN_STARTED, run)]


def cancel(run: Run, reason: str, actor: str, now: float) -> tuple[Run, list[NewEvent]]:
    """An unfinished run -> cancelled (its jobs are cancelled by the caller); an ended one is unchanged."""
    if run.ended:
        return run, []
    run = replace(run, state=RunState.CANCELLED, reason=reason, finished_at=now, updated_at=now)
    return run, [run_event(RUN_CANCELLED, run, actor=actor)]
