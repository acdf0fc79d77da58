"""Request and response models of flow control: a queue's flow limits, its scale report, the load state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from jobengine.http.schemas import INTEGRAL, Strict

Count = Annotated[StrictInt, Field(ge=1, le=1_000_000_000), INTEGRAL]


class FlowLimitsIn(Strict):
    """Replaces the queue's flow limits (fields left out are unset). See ``jobengine.core.flow.limits``."""

    rate: Annotated[StrictFloat, Field(gt=0, le=1_000_000)] | None = Field(None, description="Job starts a second")
    burst: Annotated[StrictInt, Field(ge=1, le=1_000_000), INTEGRAL] | None = Field(
        None, description="Tokens the bucket holds at most (default: the rate, rounded up)"
    )
    rate_per: Literal["queue", "tenant", "task"] = Field(
        "queue", description="One bucket per queue, per (tenant, queue) or per (tenant, task)"
    )
    concurrency: Annotated[StrictInt, Field(ge=1, le=1_000_000), INTEGRAL] | None = Field(
        None, description="Running jobs of the queue at most per concurrency_key"
    )
    concurrency_key: Annotated[StrictStr, Field(pattern=r"^(task|tenant|payload\.[A-Za-z0-9_]{1,64})$")] | None = Field(
        None, description="task, tenant or payload.<field>"
    )
    soft_limit: Count | None = Field(None, description="Depth past which enqueues are flagged (X-Queue-Pressure)")
    hard_limit: Count | None = Field(None, description="Depth past which enqueues are refused (429)")
    adaptive: StrictBool = Field(False, description="Steer the rate by error rate and latency (AIMD)")
    rate_floor: Annotated[StrictFloat, Field(gt=0, le=1_000_000)] | None = None
    rate_ceiling: Annotated[StrictFloat, Field(gt=0, le=1_000_000)] | None = None
    target_error_rate: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.05
    target_latency: Annotated[StrictFloat, Field(ge=0, le=86_400)] = 0.0


class FlowLimitsOut(BaseModel):
    queue: str
    limits: dict[str, object] | None = Field(description="The limits in force (null: none)")
    current_rate: float | None = Field(description="The rate claims use now (the adaptive limiter's)")
    pressure: Literal["none", "soft", "hard"] = Field(
        description="The queue's admission state (every tenant's depth against the limits), as X-Queue-Pressure"
    )
    depth: int = Field(description="Runnable jobs of the key's tenant (of every tenant for the scope metrics)")


class ScaleOut(BaseModel):
    queue: str
    depth: int
    running: int
    throughput: float = Field(description="Jobs finished a second over the last minute (this server's workers)")
    arrival_rate: float
    wait_p50: float
    wait_p95: float
    wait_p99: float
    run_p50: float
    run_p95: float
    run_p99: float
    workers_busy: float
    recommended_workers: int = Field(description="Worker slots to drain the backlog within target_seconds")
    target_seconds: float


class LoadOut(BaseModel):
    state: Literal["normal", "saturated"]
    reasons: list[str]
    thresholds: dict[str, float]
