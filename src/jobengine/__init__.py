"""jobengine: a durable job engine. The public API is what ``__all__`` lists; everything else is private."""

from jobengine.core.clock import ManualClock, SystemClock
from jobengine.core.models import Job, JobFilter, NewJob, Phase, PhaseState
from jobengine.core.retry import RetryPolicy
from jobengine.core.runs import Run, RunFilter, RunState, RunSummary, RunTrigger, Segment
from jobengine.core.schedules import JobTemplate, MisfirePolicy, OverlapPolicy, Schedule, ScheduleFilter, ScheduleSpec
from jobengine.core.signatures import Signature, SignatureFilter, SignatureStatus
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import (
    AlreadyExists,
    Cancelled,
    ConfigError,
    IdempotencyConflict,
    IllegalState,
    InvalidJob,
    InvalidSchedule,
    JobEngineError,
    NonRetryable,
    NotFound,
    StoreError,
    TaskTimeout,
    UnknownDependency,
    UnknownTask,
)
from jobengine.scheduler import PlanContext
from jobengine.settings import Settings
from jobengine.tasks import phase
from jobengine.worker import JobContext, SyncJobContext, Worker, WorkerOptions

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "ConfigError",
    "Engine",
    "IdempotencyConflict",
    "IllegalState",
    "InvalidJob",
    "InvalidSchedule",
    "Job",
    "JobContext",
    "JobEngineError",
    "JobFilter",
    "JobState",
    "JobTemplate",
    "ManualClock",
    "MisfirePolicy",
    "NewJob",
    "NonRetryable",
    "NotFound",
    "OverlapPolicy",
    "Phase",
    "PhaseState",
    "PlanContext",
    "RetryPolicy",
    "Run",
    "RunFilter",
    "RunState",
    "RunSummary",
    "RunTrigger",
    "Schedule",
    "ScheduleFilter",
    "ScheduleSpec",
    "Segment",
    "Settings",
    "Signature",
    "SignatureFilter",
    "SignatureStatus",
    "StoreError",
    "SyncJobContext",
    "SystemClock",
    "TaskTimeout",
    "UnknownDependency",
    "UnknownTask",
    "Worker",
    "WorkerOptions",
    "__version__",
    "phase",
]
