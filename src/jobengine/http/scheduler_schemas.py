"""Request and response models of schedules, runs and failure signatures (the scheduler's
services ``engine.schedules``, ``engine.runs``, ``engine.signatures``; JSON shapes of ``serialize.py``).

What the schema cannot say (a CRON expression's syntax, a time zone's name, a duration string, policy
combinations such as ``misfire: catch_up`` needing ``catch_up >= 1``) is checked by the engine and
refused as 422 naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, Tag

from jobengine.core.models import MAX_PRIORITY
from jobengine.core.run_requests import MAX_ENVIRONMENT, PriorityClass, RunMode
from jobengine.core.runs import RunState, RunTrigger
from jobengine.core.schedules import MAX_CATCH_UP, MAX_ITEMS, MisfirePolicy, OverlapPolicy
from jobengine.core.signatures import SignatureStatus
from jobengine.http.graph_schemas import GraphIn
from jobengine.http.schemas import INTEGRAL, JobOut, Moment, Name, Payload, Strict, TaskName

Duration = (
    Annotated[StrictFloat, Field(ge=0, le=366 * 86400)]
    | Annotated[StrictStr, Field(min_length=1, max_length=50, pattern=r"^[0-9.a-z ]+$")]
)
Reason = Annotated[StrictStr, Field(min_length=1, max_length=1000)]


class TemplateIn(Strict):
    """The jobs each run creates: one job, or with ``items`` (or a ``planner``) one job per segment."""

    task: TaskName
    payload: Payload = None
    queue: Name | None = None
    priority: Annotated[StrictInt, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY), INTEGRAL] | None = None
    max_attempts: Annotated[StrictInt, Field(ge=1, le=1000), INTEGRAL] | None = None
    items: list[Payload] | None = Field(None, max_length=MAX_ITEMS)
    planner: Name | None = None
    segment_size: Annotated[StrictInt, Field(ge=1, le=MAX_ITEMS), INTEGRAL] = 1


class RequestTemplateIn(Strict):
    """A run request each tick starts (``core.request_template``): the body of ``POST /api/v1/runs`` without
    ``run_id`` and ``reason``, over ``items`` or what a ``planner`` returns at fire time. Its ``mode`` is
    required: it tells a run request template from a job template."""

    task: TaskName
    mode: RunMode
    items: list[Payload] | None = Field(None, max_length=MAX_ITEMS)
    planner: Name | None = None
    version: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    priority: PriorityClass = PriorityClass.NORMAL
    source: Name = "default"
    environment: dict[Annotated[StrictStr, Field(min_length=1, max_length=200)], StrictStr] = Field(
        default_factory=dict, max_length=MAX_ENVIRONMENT
    )
    segment_size: Annotated[StrictInt, Field(ge=1, le=MAX_ITEMS), INTEGRAL] = 100
    queue: Name | None = None


def _template_kind(value: Any) -> str:
    """A template with ``nodes`` is a graph's, one with ``mode`` a run request's; else a job template."""
    if isinstance(value, dict):
        return "graph" if "nodes" in value else "request" if "mode" in value else "job"
    return "graph" if isinstance(value, GraphIn) else "request" if isinstance(value, RequestTemplateIn) else "job"


#: What each run makes: jobs, one graph (the body of ``POST /api/v1/graphs``; errors name
#: ``template.graph.<field>``) or the run of a run request (errors name ``template.request.<field>``).
AnyTemplateIn = Annotated[
    Annotated[TemplateIn, Tag("job")] | Annotated[GraphIn, Tag("graph")] | Annotated[RequestTemplateIn, Tag("request")],
    Discriminator(_template_kind),
]


def _one_of(a: str, b: str) -> dict[str, Any]:
    """JSON Schema for "exactly one of ``a`` and ``b`` is given, and not null"."""
    given = {"not": {"type": "null"}}
    return {
        "anyOf": [{"required": [a], "properties": {a: given}}, {"required": [b], "properties": {b: given}}],
        "not": {"required": [a, b], "properties": {a: given, b: given}},
    }


class ScheduleIn(Strict):
    """A schedule: exactly one of ``cron`` and ``every`` (seconds, or a duration like ``"30s"``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of("cron", "every"))

    name: Name
    cron: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    every: Duration | None = None
    timezone: Annotated[StrictStr, Field(min_length=1, max_length=100)] = "UTC"
    template: AnyTemplateIn
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    misfire: MisfirePolicy = MisfirePolicy.SKIP
    catch_up: Annotated[StrictInt, Field(ge=0, le=MAX_CATCH_UP), INTEGRAL] = 0
    jitter: Duration = 0.0
    enabled: StrictBool = True


class SchedulePatch(Strict):
    """The fields to change; absent or null fields stay as they are (nothing to change: the schedule is
    returned as it is). Giving ``cron`` clears ``every`` and the reverse."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {"required": ["cron", "every"],
        "properties": {"cron": {"not": {"type": "null"}}, "every": {"not": {"type": "null"}}}}})  # fmt: skip

    name: Name | None = None
    cron: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    every: Duration | None = None
    timezone: Annotated[StrictStr, Field(min_length=1, max_length=100)] | None = None
    template: AnyTemplateIn | None = None
    overlap: OverlapPolicy | None = None
    misfire: MisfirePolicy | None = None
    catch_up: Annotated[StrictInt, Field(ge=0, le=MAX_CATCH_UP), INTEGRAL] | None = None
    jitter: Duration | None = None
    enabled: StrictBool | None = None


class TriggerIn(Strict):
    reason: Reason


class RunTriggerIn(Strict):
    schedule: Annotated[StrictStr, Field(min_length=1, max_length=200, description="The schedule's id or name")]
    reason: Reason


class RunRequestIn(Strict):
    """A run of ``task`` over ``items`` (sorted and de-duplicated): ``full``, ``incremental`` (the items
    after the cursor the last successful run of the task and ``source`` left) or ``simulate``. The same
    ``run_id`` with the same request makes one run; with a different request it is refused (409)."""

    task: TaskName
    items: list[Payload] = Field(default_factory=list, max_length=MAX_ITEMS)
    version: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    mode: RunMode = RunMode.FULL
    priority: PriorityClass = PriorityClass.NORMAL
    source: Name = "default"
    environment: dict[Annotated[StrictStr, Field(min_length=1, max_length=200)], StrictStr] = Field(
        default_factory=dict, max_length=MAX_ENVIRONMENT
    )
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")] | None = None
    segment_size: Annotated[StrictInt, Field(ge=1, le=MAX_ITEMS), INTEGRAL] = 100
    queue: Name | None = None
    reason: Reason | None = None


class SchedulePreviewIn(Strict):
    """A stored schedule (id or name): its next ``count`` fire times and the jobs of each run."""

    schedule: Annotated[StrictStr, Field(min_length=1, max_length=200, description="The schedule's id or name")]
    count: Annotated[StrictInt, Field(ge=1, le=100), INTEGRAL] = 5


class SimulateIn(Strict):
    count: Annotated[StrictInt, Field(ge=1, le=1000), INTEGRAL] = 10
    after: Moment | None = Field(None, description="Ticks after this time (default: now)")


class SimulateSpecIn(SimulateIn):
    schedule: ScheduleIn = Field(description="A proposed schedule, not stored")


class RunActionIn(Strict):
    reason: Reason | None = None


class SignaturePatch(Strict):
    status: SignatureStatus | None = None
    non_retryable: StrictBool | None = None


# -- responses ---------------------------------------------------------------------------------------
class TemplateOut(BaseModel):
    task: str
    payload: Any
    queue: str | None
    priority: int | None
    max_attempts: int | None
    items: list[Any] | None
    planner: str | None
    segment_size: int


class GraphTemplateOut(BaseModel):
    """A graph template: the body of ``POST /api/v1/graphs`` each tick fires."""

    name: str
    nodes: list[dict[str, Any]]
    edges: list[list[str]]


class RequestTemplateOut(BaseModel):
    """A run request template: the run request each tick starts."""

    task: str
    mode: RunMode
    version: str | None
    priority: PriorityClass
    source: str
    items: list[Any] | None
    planner: str | None
    environment: dict[str, str]
    segment_size: int
    queue: str | None


class ScheduleOut(BaseModel):
    id: str
    tenant: str
    name: str
    cron: str | None
    every: float | None
    timezone: str
    template: TemplateOut | GraphTemplateOut | RequestTemplateOut
    overlap: OverlapPolicy
    misfire: MisfirePolicy
    catch_up: int
    jitter: float
    enabled: bool
    version: int
    next_fire_at: datetime | None
    last_tick: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    created_by: str | None
    updated_by: str | None


class ScheduleList(BaseModel):
    items: list[ScheduleOut]


class SummaryOut(BaseModel):
    total: int
    succeeded: int
    dead: int
    cancelled: int
    pending: int
    duration_total: float
    duration_max: float


class RunOut(BaseModel):
    id: str
    schedule_id: str
    tenant: str
    state: RunState
    trigger: RunTrigger
    tick: datetime | None
    reason: str | None
    actor: str | None
    parent_id: str | None
    no_work: bool
    items: int
    summary: SummaryOut
    fired_by: str | None
    created_at: datetime | None
    updated_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    #: The mode of the run request that made the run (None: a schedule's run, a retry).
    mode: RunMode | None = None
    #: The JSON that came with the trigger (an inbound hook's event); in the answer about one run only.
    trigger_data: Any = None


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class SegmentOut(BaseModel):
    run_id: str
    job_id: str
    segment: int
    items: int
    outcome: Literal["succeeded", "dead", "cancelled"] | None
    duration: float | None


class RunJobsOut(BaseModel):
    segments: list[SegmentOut]
    jobs: list[JobOut]


class NewJobOut(BaseModel):
    task: str
    queue: str
    priority: int
    max_attempts: int
    tenant: str
    run_at: datetime | None
    payload: Any


class SimulatedRunOut(BaseModel):
    tick: datetime | None
    no_work: bool
    error: str | None
    items: list[int]
    jobs: list[NewJobOut]


class SimulationOut(BaseModel):
    fire_times: list[datetime | None]
    runs: list[SimulatedRunOut]


class CursorOut(BaseModel):
    """A stream's cursor: the greatest item its successful runs reached, and the run that moved it."""

    value: Any
    run_id: str


class RunPreviewOut(BaseModel):
    """What a run request would do: ``todo`` items in ``segments`` jobs; ``before_cursor`` and ``done``
    items it leaves out; ``cursor_to``: where its success moves the cursor; ``sample``: the first items."""

    task: str
    source: str
    mode: RunMode
    cursor: CursorOut | None
    items: int
    todo: int
    before_cursor: int
    done: int
    segments: int
    cursor_to: Any
    sample: list[Any]


class SignatureOut(BaseModel):
    tenant: str
    key: str
    error_type: str
    message: str
    frames: list[str]
    task: str
    occurrences: int
    first_seen: datetime | None
    last_seen: datetime | None
    sample_job_ids: list[str]
    status: SignatureStatus
    non_retryable: bool
    updated_at: datetime | None


class SignatureList(BaseModel):
    items: list[SignatureOut]


class DiffEntryOut(BaseModel):
    """One item of a simulate run's diff: ``change`` and its result in the full run (``before``) and in the
    simulate run (``after``)."""

    item: Any
    change: Literal["same", "changed", "new", "gone"]
    before: Any
    after: Any


class RunDiffOut(BaseModel):
    """A simulate run against the newest completed full run of its task and source (``base_run_id``, None
    when there is none): ``counts`` per change, ``unfinished`` items whose segment did not succeed, and the
    ``entries`` (unchanged items only with ``?same=true``), in item order."""

    run_id: str
    base_run_id: str | None
    counts: dict[str, int]
    unfinished: int
    entries: list[DiffEntryOut]
