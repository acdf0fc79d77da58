"""Rows of the scheduler's tables as both SQL backends read and write them: column lists and the mapping
to and from schedules, runs, segments and signatures. JSON columns travel as text (codec-encoded), so the
mapping is the same for SQLite's TEXT and PostgreSQL's jsonb (selected as ``::text``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from jobengine.core import codec
from jobengine.core.ids import JobId, RunId, ScheduleId
from jobengine.core.runs import Run, RunState, RunSummary, RunTrigger, Segment
from jobengine.core.schedules import Schedule, ScheduleSpec
from jobengine.core.signatures import Signature, SignatureStatus
from jobengine.core.states import JobState

#: What :func:`schedule_values` gives, in order.
SCHEDULE_WRITE_COLUMNS: Final = (
    "id, tenant, name, spec, enabled, version, cursor, next_fire_at, created_at, updated_at, created_by, updated_by"
)

RUN_COLUMNS: Final = (
    "id, schedule_id, tenant, state, trigger, created_at, updated_at, tick, reason, actor, parent_id, no_work, "
    "items, total, succeeded, dead, cancelled, duration_total, duration_max, fired_by, started_at, finished_at"
)
RUN_WIDTH: Final = len(RUN_COLUMNS.split(", "))
#: ``Run.trigger_data`` (JSON text): written with a new run and read by ``get_runs`` only, never by the job
#: paths that read and rewrite RUN_COLUMNS as jobs end (an inbound event may be tens of KiB).
TRIGGER_DATA: Final = "trigger_data"

SEGMENT_COLUMNS: Final = "run_id, job_id, segment, items, outcome, duration"

SIGNATURE_COLUMNS: Final = (
    "tenant, key, error_type, message, frames, task, occurrences, first_seen, last_seen, sample_job_ids, "
    "status, non_retryable, updated_at"
)
SIGNATURE_WIDTH: Final = len(SIGNATURE_COLUMNS.split(", "))


def schedule_from_row(r: Sequence[Any]) -> Schedule:
    return Schedule(
        id=ScheduleId(r[0]), spec=ScheduleSpec.from_json(codec.loads(r[1])), version=r[2], cursor=r[3],
        next_fire_at=r[4], created_at=r[5], updated_at=r[6], created_by=r[7], updated_by=r[8],
    )  # fmt: skip


def schedule_values(s: Schedule) -> tuple[Any, ...]:
    """The values of :data:`SCHEDULE_WRITE_COLUMNS`, in order (booleans as bool: SQLite stores them as 0 / 1)."""
    return (
        s.id, s.tenant, s.name, codec.dumps(s.spec.to_json(), "schedule"), s.enabled, s.version, s.cursor,
        s.next_fire_at, s.created_at, s.updated_at, s.created_by, s.updated_by,
    )  # fmt: skip


def run_from_row(r: Sequence[Any]) -> Run:
    return Run(
        id=RunId(r[0]), schedule_id=ScheduleId(r[1]), tenant=r[2], state=RunState(r[3]), trigger=RunTrigger(r[4]),
        created_at=r[5], updated_at=r[6], tick=r[7], reason=r[8], actor=r[9],
        parent_id=RunId(r[10]) if r[10] is not None else None, no_work=bool(r[11]), items=r[12],
        summary=RunSummary(r[13], r[14], r[15], r[16], r[17], r[18]), fired_by=r[19], started_at=r[20],
        finished_at=r[21],
    )  # fmt: skip


def run_values(run: Run) -> tuple[Any, ...]:
    """The values of :data:`RUN_COLUMNS`, in order."""
    s = run.summary
    return (
        run.id, run.schedule_id, run.tenant, run.state.value, run.trigger.value, run.created_at, run.updated_at,
        run.tick, run.reason, run.actor, run.parent_id, run.no_work, run.items, s.total, s.succeeded, s.dead,
        s.cancelled, s.duration_total, s.duration_max, run.fired_by, run.started_at, run.finished_at,
    )  # fmt: skip


def trigger_data_value(run: Run) -> str | None:
    return None if run.trigger_data is None else codec.dumps(run.trigger_data, "trigger_data")


def with_trigger_data(run: Run, raw: str | None) -> Run:
    return run if raw is None else replace(run, trigger_data=codec.loads(raw))


def with_mode(run: Run, mode: str | None) -> Run:
    """``run`` with the mode its row's ``mode`` column holds (kept apart from RUN_COLUMNS, which the job
    paths rewrite: the mode is written once, with the run)."""
    return run if mode is None else replace(run, mode=mode)


def segment_from_row(r: Sequence[Any]) -> Segment:
    outcome = JobState(r[4]) if r[4] is not None else None
    return Segment(run_id=RunId(r[0]), job_id=JobId(r[1]), index=r[2], items=r[3], outcome=outcome, duration=r[5])


def signature_from_row(r: Sequence[Any]) -> Signature:
    return Signature(
        tenant=r[0], key=r[1], error_type=r[2], message=r[3], frames=tuple(codec.loads(r[4])), task=r[5],
        occurrences=r[6], first_seen=r[7], last_seen=r[8], sample_job_ids=tuple(JobId(j) for j in codec.loads(r[9])),
        status=SignatureStatus(r[10]), non_retryable=bool(r[11]), updated_at=r[12],
    )  # fmt: skip


def signature_values(s: Signature) -> tuple[Any, ...]:
    return (
        s.tenant, s.key, s.error_type, s.message, codec.dumps(list(s.frames), "frames"), s.task, s.occurrences,
        s.first_seen, s.last_seen, codec.dumps(list(s.sample_job_ids), "sample_job_ids"), s.status.value,
        s.non_retryable, s.updated_at,
    )  # fmt: skip
