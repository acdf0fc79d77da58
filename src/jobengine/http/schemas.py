"""Request and response models of the jobs, queues, dead-letter and events resources.

Requests are strict: unknown fields are refused (``extra="forbid"``) and numbers, strings and booleans are
not coerced from one another. Responses mirror :mod:`jobengine.serialize` exactly (the routes return its
output; these models document it and the schemathesis test holds the two equal).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from jobengine.core import bounds
from jobengine.core.models import MAX_PRIORITY, NAME_RE
from jobengine.core.selection import MAX_BULK
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob

MAX_DEPTH = bounds.MAX_DEPTH  # nesting of a payload: deeper is refused (and cannot exhaust the encoder)
MAX_BATCH = 1000


def _integral(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer; strings and booleans stay refused (StrictInt)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: Put after the constraints (``Annotated[StrictInt, Field(ge=...), INTEGRAL]``): placed before them, it
#: hides them from the JSON schema.
INTEGRAL = BeforeValidator(_integral)
NAME_PATTERN = NAME_RE.pattern
Name = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)]
# A task: a name without "@", or a task of a pack, <pack>@<version>:<task> (jobengine.packs.jobs.TASK_REF).
TASK_PATTERN = (
    r"^(?:[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}"
    r"|[a-z][a-z0-9_-]{0,63}@[0-9A-Za-z.+\-]{1,64}:[A-Za-z0-9][A-Za-z0-9_-]{0,63})$"
)
TaskName = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=TASK_PATTERN)]
JobIdStr = Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]


def check_json(value: Any) -> Any:
    """Refuse what a backend cannot store and read back (``core.bounds``): NaN / Infinity (Python's parser
    accepts them), NUL and lone surrogates in strings and keys, integers too long to read back, nesting
    deeper than MAX_DEPTH."""
    try:
        bounds.check_json("value", value, MAX_DEPTH)
    except InvalidJob as exc:
        raise ValueError(exc.message.replace("(at value.", "(at ")) from None
    return value


def _iso_text(value: Any) -> Any:
    """Refuse a number (or a string of one): pydantic would read it as seconds since 1970, which the schema
    (a date-time string) does not offer, and a typo such as ``created_before=2026`` would mean 1970."""
    if isinstance(value, bool | int | float) or (
        isinstance(value, str) and value.strip().lstrip("+-").replace(".", "", 1).isdigit()
    ):
        raise ValueError("an ISO 8601 time with a time zone (2026-01-31T09:00:00Z), not a number")
    return value


def _moment(value: datetime) -> datetime:
    error = bounds.time_error(value)
    if error is not None:
        raise ValueError(error)
    return value


#: A time a request gives: ISO 8601 with a time zone, within ``core.bounds`` (1970 to 9998, in UTC).
Moment = Annotated[AwareDatetime, BeforeValidator(_iso_text), AfterValidator(_moment)]


Payload = Annotated[
    JsonValue,
    AfterValidator(check_json),
    Field(
        description=f"Any JSON value, nested at most {MAX_DEPTH} deep; no NUL (U+0000) or lone surrogate in "
        "strings or keys"
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests ----------------------------------------------------------------------------------------
class JobIn(Strict):
    """A job to enqueue. Defaults come from the task, if this server has it registered."""

    # run_at and delay are alternatives: the schema says "not both" so that clients (and schemathesis) see it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {
                "required": ["run_at", "delay"],
                "properties": {"run_at": {"not": {"type": "null"}}, "delay": {"not": {"type": "null"}}},
            }
        },
    )

    task: TaskName
    payload: Payload = None
    queue: Name | None = None
    priority: Annotated[StrictInt, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY), INTEGRAL] | None = None
    run_at: Moment | None = Field(
        None, description=f"When to run it (ISO 8601 with a time zone, {bounds.MIN_TIME_ISO} to {bounds.MAX_TIME_ISO})"
    )
    delay: Annotated[StrictFloat, Field(ge=0, le=10 * 366 * 86400)] | None = Field(
        None, description="Seconds from now to run it (instead of run_at)"
    )
    max_attempts: Annotated[StrictInt, Field(ge=1, le=1000), INTEGRAL] | None = None
    idempotency_key: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None
    depends_on: list[JobIdStr] = Field(default_factory=list, max_length=100)
    timeout: Annotated[StrictFloat, Field(gt=0, le=366 * 86400)] | None = None


class JobBatchIn(Strict):
    jobs: list[JobIn] = Field(min_length=1, max_length=MAX_BATCH)


class CancelIn(Strict):
    reason: Annotated[StrictStr, Field(min_length=1, max_length=500)] = "cancelled by user"


class DeadSelectIn(Strict):
    """Which dead jobs: ``ids`` (those that are dead jobs of the tenant), else every one (of ``queue``)."""

    ids: list[JobIdStr] | None = Field(None, min_length=1, max_length=MAX_BATCH)
    queue: Name | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH), INTEGRAL] = MAX_BATCH


IdPrefix = Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
SearchText = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class JobFilterIn(Strict):
    """The jobs a bulk action takes, as ``GET /api/v1/jobs`` selects them (every field given must hold)."""

    state: list[JobState] | None = Field(None, max_length=9)
    queue: Name | None = None
    task: TaskName | None = None
    id: IdPrefix | None = Field(None, description="Ids starting with this")
    created_after: Moment | None = None
    created_before: Moment | None = None
    payload: SearchText | None = Field(None, description="A substring of the payload's JSON, case as written")


class BulkIn(Strict):
    """One action on many jobs: exactly one of ``ids`` (whole ids) and ``filter``."""

    action: Literal["cancel", "retry", "replay", "delete"]
    ids: list[JobIdStr] | None = Field(None, min_length=1, max_length=MAX_BULK)
    filter: JobFilterIn | None = None
    reason: Annotated[StrictStr, Field(min_length=1, max_length=500)] = "cancelled by user"
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_BULK), INTEGRAL] = MAX_BULK


class QueueLimitsIn(Strict):
    concurrency: Annotated[StrictInt, Field(ge=1, le=1_000_000), INTEGRAL] | None = Field(
        description="Running jobs of the queue at most (null: no limit)"
    )


# -- responses ---------------------------------------------------------------------------------------
class LeaseOut(BaseModel):
    worker: str
    expires_at: datetime | None


class PhaseOut(BaseModel):
    name: str
    state: Literal["pending", "running", "succeeded", "failed"]
    progress: float
    message: str | None
    result: Any
    checkpoint: Any
    started_at: datetime | None
    finished_at: datetime | None


class ErrorOut(BaseModel):
    attempt: int
    at: datetime | None
    type: str
    message: str
    traceback: str | None
    worker: str | None


class JobOut(BaseModel):
    id: str
    tenant: str
    queue: str
    task: str
    state: JobState
    outcome: JobState | None
    payload: Any
    priority: int
    run_at: datetime | None
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    depends_on: list[str]
    timeout: float | None
    lease: LeaseOut | None
    cancel_requested: bool
    reason: str | None
    progress: float
    phases: list[PhaseOut]
    result: Any
    errors: list[ErrorOut]
    created_at: datetime | None
    updated_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    run_id: str | None = Field(None, description="The run whose segment this job is (jobs of a schedule)")
    schedule_id: str | None = None
    graph_id: str | None = Field(None, description="The graph this job is a node of")
    trace: str | None = Field(
        None, description="The W3C traceparent the job was enqueued under (null with tracing off; docs/tracing.md)"
    )
    has_dependents: bool = Field(
        False, description="A job was enqueued depending on this one (a worker reports its outcome at once)"
    )
    waiting_for: str | None = Field(
        None,
        description='Why a runnable job is not running, when no live worker can run it ("no worker runs task '
        "'report'\")",
    )


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end")


class JobBatchOut(BaseModel):
    jobs: list[JobOut]
    created: list[bool]


class EventOut(BaseModel):
    id: int
    at: datetime | None
    type: str
    tenant: str
    job_id: str | None
    queue: str | None
    task: str | None
    data: dict[str, Any]


class EventPage(BaseModel):
    items: list[EventOut]
    last_id: int = Field(description="The id to pass as `after` for the next page")


class QueueOut(BaseModel):
    name: str
    counts: dict[str, int] = Field(description="The caller's jobs in the queue, by state")
    depth: int = Field(description="The caller's jobs waiting to run (queued, scheduled, failed)")
    paused: bool
    concurrency: int | None


class QueueList(BaseModel):
    items: list[QueueOut]


class DeadReplayOut(BaseModel):
    replayed: list[JobOut]


class PurgeOut(BaseModel):
    purged: int


class StatusOut(BaseModel):
    status: str
    checks: dict[str, dict[str, Any]] = Field(default_factory=dict)


class WorkerOut(BaseModel):
    id: str
    kind: str = Field(description="local (a process on the store) or remote (over the worker protocol)")
    host: str
    pid: int
    version: str
    queues: list[str]
    tasks: list[str]
    packs: list[str]
    concurrency: int
    started_at: datetime | None
    last_seen: datetime | None
    in_flight: int | None = Field(description="Jobs it holds now, of every tenant (keys with the metrics scope)")


class WorkerList(BaseModel):
    items: list[WorkerOut]


__all__ = [
    "CancelIn",
    "DeadReplayOut",
    "DeadSelectIn",
    "EventOut",
    "EventPage",
    "JobBatchIn",
    "JobIn",
    "JobOut",
    "JobPage",
    "PurgeOut",
    "QueueLimitsIn",
    "QueueList",
    "QueueOut",
    "StatusOut",
    "StrictBool",
    "WorkerList",
    "WorkerOut",
]


class RefusedOut(BaseModel):
    id: str
    reason: str


class BulkOut(BaseModel):
    """What a bulk action did: ``matched`` jobs looked at, ``changed`` of them changed (their ids in
    ``changed_ids``), ``refused_count`` left as they are (the first 100 in ``refused``, each with why);
    ``more``: the filter matches more jobs than ``limit`` (send it again for the rest)."""

    action: str
    matched: int
    changed: int
    changed_ids: list[str]
    refused: list[RefusedOut]
    refused_count: int
    more: bool
