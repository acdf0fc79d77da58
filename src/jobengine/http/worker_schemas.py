"""Models of the worker protocol (``/api/v1/worker``): claim, heartbeat, phases, report."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from jobengine.core.graphs import MAX_ADDED
from jobengine.http.graph_schemas import GraphNodeIn
from jobengine.http.schemas import INTEGRAL, JobIdStr, JobOut, Moment, Name, Payload, Strict

WorkerIdStr = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
Token = Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_\-]+$")]
LeaseSeconds = Annotated[StrictFloat, Field(ge=1, le=86400, description="Lease length in seconds")]
MAX_REPORT = 1000


class ClaimIn(Strict):
    worker_id: WorkerIdStr
    queues: list[Name] = Field(default_factory=lambda: ["default"], min_length=1, max_length=100)
    tasks: list[Name] | None = Field(
        None, min_length=1, max_length=1000, description="Claim only jobs of these tasks (null: any task)"
    )
    limit: Annotated[StrictInt, Field(ge=1, le=100), INTEGRAL] = 1
    lease_seconds: LeaseSeconds = 30.0
    wait: Annotated[StrictFloat, Field(ge=0, le=60)] = Field(
        0.0, description="Long-poll: wait up to this many seconds for a job (capped by the server)"
    )
    # What the registry of live workers shows of this worker (GET /api/v1/workers); all optional.
    host: Annotated[StrictStr, Field(max_length=255, pattern=r"^[\x21-\x7e]*$")] | None = None
    pid: Annotated[StrictInt, Field(ge=0, le=2**31 - 1), INTEGRAL] | None = None
    version: Annotated[StrictStr, Field(max_length=100, pattern=r"^[\x21-\x7e]*$")] | None = None
    packs: list[Name] | None = Field(None, max_length=1000)
    concurrency: Annotated[StrictInt, Field(ge=0, le=100_000), INTEGRAL] | None = None


class LeaseOut(BaseModel):
    token: str = Field(description="The fencing token: send it with every report about this job")
    expires_at: datetime


class NodeOut(BaseModel):
    """What a claimed graph node is in its graph; its parents' results come from ``GET
    /api/v1/worker/jobs/{id}/parent-results`` when the handler asks for them."""

    id: str = Field(description="The graph's id")
    node: str = Field(description="This job's node name in the graph")


class ClaimedJob(BaseModel):
    job: JobOut
    lease: LeaseOut
    graph: NodeOut | None = Field(None, description="Set for a graph node only (null for any other job)")


class ParentResultsOut(BaseModel):
    """The results of a graph node's parents that succeeded, by node name (a parent that failed under the
    ``continue`` policy is absent). Read from the store when asked, so a retry sees them too."""

    graph_id: str | None = Field(description="The graph the job is a node of (null: not a graph node)")
    node: str | None = Field(description="The job's node name (null: not a graph node)")
    results: dict[str, Payload] = Field(description="Parents' results by node name ({} for a plain job)")


class ClaimOut(BaseModel):
    jobs: list[ClaimedJob]


class LeaseIn(Strict):
    job_id: JobIdStr
    token: Token


class HeartbeatIn(Strict):
    leases: list[LeaseIn] = Field(min_length=1, max_length=MAX_REPORT)
    lease_seconds: LeaseSeconds = 30.0


class HeartbeatOut(BaseModel):
    held: list[str] = Field(description="Leases extended")
    lost: list[str] = Field(description="Leases no longer held: stop these jobs, report nothing")
    cancel_requested: list[str] = Field(description="Held jobs asked to stop: end them cancelled")


class JobHeartbeatIn(Strict):
    token: Token
    lease_seconds: LeaseSeconds = 30.0


class JobHeartbeatOut(BaseModel):
    cancel_requested: bool
    lease_expires_at: datetime


class PhaseIn(Strict):
    name: Name
    state: Literal["pending", "running", "succeeded", "failed"] = "pending"
    progress: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.0
    message: Annotated[StrictStr, Field(max_length=2000)] | None = None
    result: Payload = None
    checkpoint: Payload = None
    started_at: Moment | None = None
    finished_at: Moment | None = None


PhaseEvent = Literal["phase.started", "phase.succeeded", "phase.failed", "phase.progress"]


class PhasesIn(Strict):
    """Every phase record of the job, as the worker has them now (replaces the stored ones)."""

    token: Token
    phases: list[PhaseIn] = Field(min_length=1, max_length=100)
    event: PhaseEvent | None = Field(None, description="A phase transition to record as a job.phase event")
    event_data: dict[str, Payload] | None = None


class PhaseUpdateIn(PhasesIn):
    job_id: JobIdStr


class PhasesBatchIn(Strict):
    updates: list[PhaseUpdateIn] = Field(min_length=1, max_length=MAX_REPORT)


class HeldOut(BaseModel):
    held: list[str]
    lost: list[str]


class ErrorIn(Strict):
    type: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    message: Annotated[StrictStr, Field(max_length=2000)] = ""
    traceback: Annotated[StrictStr, Field(max_length=20_000)] | None = None


class AddedNodeIn(GraphNodeIn):
    """A node the completing graph node adds to its graph (dynamic fan-out), stored with the completion."""

    after: list[Name] = Field(
        default_factory=list, max_length=MAX_ADDED,
        description="Nodes it runs after: the completing node or nodes added with it (empty: the completing node)",
    )  # fmt: skip
    before: list[Name] = Field(
        default_factory=list, max_length=1000,
        description="Nodes of the graph waiting on the completing node that wait on this one too (a fan-in)",
    )  # fmt: skip


class CompleteIn(Strict):
    token: Token
    result: Payload = None
    nodes: list[AddedNodeIn] = Field(
        default_factory=list, max_length=MAX_ADDED,
        description="Graph nodes this node adds to its graph, stored in the completion's transaction",
    )  # fmt: skip


class FailIn(Strict):
    token: Token
    error: ErrorIn
    retryable: StrictBool = Field(True, description="false: straight to dead, whatever attempts remain")
    cancelled: StrictBool = Field(False, description="the job stopped because it was asked to cancel")
    retry_delay: Annotated[StrictFloat, Field(ge=0, le=366 * 86400)] | None = Field(
        None, description="Seconds until the retry (default: the server's backoff)"
    )


class ReleaseIn(Strict):
    token: Token


class CompletionIn(CompleteIn):
    job_id: JobIdStr


class FailureIn(FailIn):
    job_id: JobIdStr


class ReportIn(Strict):
    completions: list[CompletionIn] = Field(default_factory=list, max_length=MAX_REPORT)
    failures: list[FailureIn] = Field(default_factory=list, max_length=MAX_REPORT)
    releases: list[LeaseIn] = Field(default_factory=list, max_length=MAX_REPORT)


class ReportOut(BaseModel):
    completed: list[str]
    failed: list[str]
    released: list[str]
    refused: list[str] = Field(description="Reports fenced out: the lease was lost (or no such job)")
