"""Domain values shared by every layer. Times are float UNIX seconds; payloads and results are JSON values.

Values validate in their constructor, so a bad job is refused before it reaches any store.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeAlias, TypeVar, dataclass_transform

from jobengine.core.bounds import MAX_TIME, MIN_TIME, check_json, check_time, text_error
from jobengine.core.ids import GraphId, JobId, LeaseToken, RunId, ScheduleId, WorkerId, new_job_id
from jobengine.core.states import TERMINAL, JobState
from jobengine.errors import InvalidJob

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[_T]) -> type[_T]:
    """A value object: immutable to the type checker (assigning a field is a mypy error), a plain slotted
    dataclass at run time. A frozen dataclass sets each field through ``object.__setattr__``, which makes a
    ``Job`` several times dearer to build (docs/decisions/0020-positional-construction.md); jobs are built
    on every enqueue, claim and completion. Hashable like a frozen dataclass (by value)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


Json: TypeAlias = Any  # a JSON value: dict / list / str / int / float / bool / None

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-@/]{0,199}$")
MAX_PRIORITY = 1_000_000


@functools.lru_cache(maxsize=4096)
def _valid_name(value: str) -> bool:
    # Cached: a process enqueues the same few task, queue and tenant names millions of times.
    return NAME_RE.match(value) is not None


@functools.lru_cache(maxsize=4096)
def _valid_names(task: object, queue: object, tenant: object) -> bool:
    """A job's three names at once (NewJob); non-strings give False (so the caller checks one by one)."""
    return all(isinstance(v, str) and NAME_RE.match(v) is not None for v in (task, queue, tenant))


def check_name(field_name: str, value: object) -> str:
    if not isinstance(value, str) or not _valid_name(value):
        raise InvalidJob(
            field_name,
            f"must be 1-200 characters of letters, digits and _.:-@/, starting with a letter or digit (got {value!r})",
        )
    return value


#: A W3C ``traceparent`` header value of version 00 (lower-case hex; an all-zero trace or span id is invalid).
TRACEPARENT: Final = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


@value
class NewJob:
    """A request to run ``task``. ``run_at`` None means now. Raises :class:`InvalidJob` naming the field."""

    task: str
    payload: Json = None
    queue: str = "default"
    priority: int = 0  # higher runs first
    run_at: float | None = None
    max_attempts: int = 3
    idempotency_key: str | None = None
    depends_on: tuple[JobId, ...] = ()
    tenant: str = "default"
    timeout: float | None = None
    id: JobId = field(default_factory=new_job_id)
    #: Set by the scheduler on the jobs (segments) of a run: the run and the schedule it belongs to.
    run_id: RunId | None = None
    schedule_id: ScheduleId | None = None
    #: The W3C ``traceparent`` of the span that enqueued the job (:mod:`jobengine.tracing` sets it), so the
    #: span of each run, in whatever process, joins that trace.
    trace: str | None = None

    def __post_init__(self) -> None:
        # The usual job first, in one cached lookup and plain type checks, cheaper than the checks one by one
        # (docs/decisions/0021-enqueue-client-instructions.md); anything else (a bad value, an int subclass)
        # gets the full checks below.
        try:
            names = _valid_names(self.task, self.queue, self.tenant)
        except TypeError:  # an unhashable name
            names = False
        if not names:
            check_name("task", self.task)
            check_name("queue", self.queue)
            check_name("tenant", self.tenant)
        priority, attempts = self.priority, self.max_attempts
        if not (type(priority) is int and -MAX_PRIORITY <= priority <= MAX_PRIORITY) and (
            not isinstance(priority, int)
            or isinstance(priority, bool)
            or not (-MAX_PRIORITY <= priority <= MAX_PRIORITY)
        ):
            raise InvalidJob("priority", f"must be an integer between -{MAX_PRIORITY} and {MAX_PRIORITY}")
        if not (type(attempts) is int and 1 <= attempts <= 1000) and (
            not isinstance(attempts, int) or isinstance(attempts, bool) or not (1 <= attempts <= 1000)
        ):
            raise InvalidJob("max_attempts", "must be an integer from 1 to 1000")
        run_at = self.run_at
        if run_at is not None and (
            not isinstance(run_at, int | float) or isinstance(run_at, bool) or not MIN_TIME <= run_at <= MAX_TIME
        ):
            check_time("run_at", run_at)  # raises, naming the bound
            raise InvalidJob("run_at", "must be UNIX seconds")
        if self.timeout is not None and (not isinstance(self.timeout, int | float) or self.timeout <= 0):
            raise InvalidJob("timeout", "must be a positive number of seconds")
        if self.idempotency_key is not None and (
            not isinstance(self.idempotency_key, str) or not 1 <= len(self.idempotency_key) <= 255
        ):
            raise InvalidJob("idempotency_key", "must be a string of 1-255 characters")
        if self.idempotency_key is not None and (error := text_error(self.idempotency_key)) is not None:
            raise InvalidJob("idempotency_key", error)
        check_json("payload", self.payload)
        # Accept any iterable of ids from callers that pass a list; store a tuple.
        if type(self.depends_on) is not tuple:
            object.__setattr__(self, "depends_on", tuple(self.depends_on))
        if self.depends_on and self.id in self.depends_on:
            raise InvalidJob("depends_on", "a job cannot depend on itself")
        if self.run_id is not None or self.schedule_id is not None:
            for name in ("run_id", "schedule_id"):
                value = getattr(self, name)
                if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= 200):
                    raise InvalidJob(name, "must be a string of 1-200 characters")
        if self.trace is not None and (not isinstance(self.trace, str) or not TRACEPARENT.fullmatch(self.trace)):
            raise InvalidJob("trace", "must be a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>")


class PhaseState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@value
class Phase:
    """The persisted state of one phase of a job."""

    name: str
    state: PhaseState = PhaseState.PENDING
    progress: float = 0.0
    result: Json = None
    checkpoint: Json = None
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def to_json(self) -> dict[str, Json]:
        return {
            "name": self.name,
            "state": self.state.value,
            "progress": self.progress,
            "result": self.result,
            "checkpoint": self.checkpoint,
            "message": self.message,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Json]) -> Phase:
        return cls(
            name=d["name"],
            state=PhaseState(d.get("state", "pending")),
            progress=float(d.get("progress") or 0.0),
            result=d.get("result"),
            checkpoint=d.get("checkpoint"),
            message=d.get("message"),
            started_at=d.get("started_at"),
            finished_at=d.get("finished_at"),
        )


def overall_progress(phases: Sequence[Phase]) -> float:
    """Overall progress is derived: each phase weighs the same."""
    if not phases:
        return 0.0
    return sum(1.0 if p.state is PhaseState.SUCCEEDED else max(0.0, min(1.0, p.progress)) for p in phases) / len(phases)


@value
class AttemptError:
    """What went wrong in one attempt; every attempt's error is kept on the job."""

    attempt: int
    at: float
    type: str
    message: str
    traceback: str | None = None
    worker: str | None = None

    def to_json(self) -> dict[str, Json]:
        return {
            "attempt": self.attempt,
            "at": self.at,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "worker": self.worker,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Json]) -> AttemptError:
        return cls(
            attempt=int(d["attempt"]),
            at=float(d["at"]),
            type=str(d["type"]),
            message=str(d["message"]),
            traceback=d.get("traceback"),
            worker=d.get("worker"),
        )


@value
class Job:
    id: JobId
    tenant: str
    queue: str
    task: str
    payload: Json
    priority: int
    run_at: float
    state: JobState
    attempt: int  # attempts started so far
    max_attempts: int
    created_at: float
    updated_at: float
    idempotency_key: str | None = None
    depends_on: tuple[JobId, ...] = ()
    timeout: float | None = None
    lease_worker: WorkerId | None = None
    lease_token: LeaseToken | None = None
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    reason: str | None = None  # why it was cancelled / released / dead
    phases: tuple[Phase, ...] = ()
    progress: float = 0.0
    result: Json = None
    errors: tuple[AttemptError, ...] = ()
    outcome: JobState | None = None  # the terminal state a stale job had
    started_at: float | None = None
    finished_at: float | None = None
    run_id: RunId | None = None  # the run whose segment this job is (jobs a schedule created)
    schedule_id: ScheduleId | None = None
    #: A job was enqueued depending on this one. A worker reports the outcome of such a job at once instead
    #: of batching it (``worker_flush_spacing``), so its dependents start without waiting for the batch.
    has_dependents: bool = False
    #: The graph this job is a node of (:mod:`jobengine.core.graphs`); None for every other job.
    graph_id: GraphId | None = None
    #: The W3C ``traceparent`` the job was enqueued under (:attr:`NewJob.trace`), None if none.
    trace: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL or self.state is JobState.STALE

    @property
    def final_state(self) -> JobState:
        """The outcome, also for a stale job."""
        return self.outcome if self.state is JobState.STALE and self.outcome else self.state


@value
class Lease:
    job_id: JobId
    token: LeaseToken


@value
class AddedNode:
    """A node a running graph node adds to its own graph when it completes (dynamic fan-out): stored in
    the transaction that completes the adding node, or not at all. ``after``: the nodes it runs after,
    the adding node or nodes added with it (empty: the adding node); ``before``: nodes of the graph that
    run after the adding node and must wait for this one too (a fan-in declared in advance). Checked
    against the graph by :func:`jobengine.core.graphs.check_added`."""

    name: str
    task: str
    payload: Json = None
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    policy: str = "cancel"
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None


@value
class Completion:
    """A succeeded attempt: its result, and the nodes it adds to its graph (empty for most)."""

    job_id: JobId
    token: LeaseToken
    result: Json = None
    nodes: tuple[AddedNode, ...] = ()


class FailOutcome(StrEnum):
    RETRY = "retry"  # -> failed, runs again at retry_at
    DEAD = "dead"
    CANCELLED = "cancelled"  # the task stopped because it was cancelled


@value
class Failure:
    """A failed attempt. ``only_if_expired_at``: apply only if the lease expired before that time (rescue)."""

    job_id: JobId
    token: LeaseToken
    error: AttemptError
    outcome: FailOutcome
    retry_at: float | None = None
    only_if_expired_at: float | None = None


@value
class PhaseUpdate:
    """New phase records for a running job, fenced by its lease. ``event`` names a phase transition, if any."""

    job_id: JobId
    token: LeaseToken
    phases: tuple[Phase, ...]
    event: str | None = None
    event_data: Mapping[str, Json] | None = None


@value
class Event:
    """An append-only record of one state change, numbered monotonically by the store."""

    id: int
    at: float
    type: str
    tenant: str
    job_id: JobId | None
    queue: str | None
    task: str | None
    data: Mapping[str, Json]


@value
class NewEvent:
    """An event before the store numbered it."""

    type: str
    tenant: str
    job_id: JobId | None
    queue: str | None
    task: str | None
    data: Mapping[str, Json]


@value
class Changed:
    """What a store transition did: the jobs as they now are, and the events it appended."""

    jobs: list[Job] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def then(self, later: Changed) -> Changed:
        """This transition followed by ``later`` in the same transaction: the events of both, and each job
        once, where it was first listed, in the state ``later`` left it (a graph node cancelled and then
        queued again under its failure policy is listed queued)."""
        last = {j.id: j for j in later.jobs}
        jobs = [last.pop(j.id, j) for j in self.jobs]
        return Changed([*jobs, *last.values()], [*self.events, *later.events])


@value
class Inserted:
    jobs: list[Job]
    created: list[bool]
    events: list[Event]


@value
class Heartbeat:
    held: frozenset[JobId]
    cancel_requested: frozenset[JobId]


@value
class JobFilter:
    """Which jobs a listing or a bulk action takes, newest first. Every field given must hold.

    ``id_prefix``: ids starting with it (a range of the primary key); ``created_after`` / ``created_before``:
    UNIX seconds, both exclusive; ``payload_text``: a substring of the payload's JSON text, case as written
    (no index serves it: the store reads the newest jobs the other fields select until it has
    ``limit``). Check input with :func:`check_filter` at the edges."""

    tenant: str | None = None
    states: tuple[JobState, ...] = ()
    queue: str | None = None
    task: str | None = None
    limit: int = 100
    before_id: JobId | None = None  # newest first; page with the last id seen
    id_prefix: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    payload_text: str | None = None


#: Characters a job id (and so an id prefix) may hold.
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
#: The longest payload text a search takes.
MAX_SEARCH_TEXT = 200


def check_filter(f: JobFilter) -> JobFilter:
    """``f`` if every search field is one a store can answer, else InvalidJob naming the field."""
    if f.id_prefix is not None and not (1 <= len(f.id_prefix) <= 100 and set(f.id_prefix) <= ID_CHARS):
        raise InvalidJob("id", "an id prefix is 1 to 100 letters, digits or _ . : -")
    for name, at in (("created_after", f.created_after), ("created_before", f.created_before)):
        if at is not None:
            check_time(name, at)
    if f.payload_text is not None:
        if not 1 <= len(f.payload_text) <= MAX_SEARCH_TEXT:
            raise InvalidJob("payload", f"search text is 1 to {MAX_SEARCH_TEXT} characters")
        if (error := text_error(f.payload_text)) is not None:
            raise InvalidJob("payload", error)
    return f


def filter_matches(f: JobFilter, job: Job, payload_json: str) -> bool:
    """Whether ``job`` (its payload as JSON text ``payload_json``) is one ``f`` selects, ``limit`` aside:
    the rule every store's ``list_jobs`` follows, written once for the tests' reference store."""
    return (
        (f.before_id is None or job.id < f.before_id)
        and (f.tenant is None or job.tenant == f.tenant)
        and (not f.states or job.state in f.states)
        and (f.queue is None or job.queue == f.queue)
        and (f.task is None or job.task == f.task)
        and (f.id_prefix is None or job.id.startswith(f.id_prefix))
        and (f.created_after is None or job.created_at > f.created_after)
        and (f.created_before is None or job.created_at < f.created_before)
        and (f.payload_text is None or f.payload_text in payload_json)
    )


@value
class Pruned:
    staled: int
    deleted: int
    events: list[Event]
