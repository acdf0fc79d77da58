"""jobengine: a durable job engine. The public API is what ``__all__`` lists; everything else is private.

The scheduler's types (schedules, runs, failure signatures, ``PlanContext``) are imported when first named
(PEP 562): a worker process, which needs none of them, starts without loading their modules.
"""

from typing import TYPE_CHECKING, Any

from jobengine.core.clock import ManualClock, SystemClock
from jobengine.core.models import Job, JobFilter, NewJob, Phase, PhaseState
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import (
    AlreadyExists,
    AmbiguousId,
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
from jobengine.settings import Settings
from jobengine.tasks import phase
from jobengine.version import __version__
from jobengine.worker import JobContext, SyncJobContext, Worker, WorkerOptions

if TYPE_CHECKING:
    from jobengine.core.runs import Run, RunFilter, RunState, RunSummary, RunTrigger, Segment
    from jobengine.core.schedules import (
        JobTemplate,
        MisfirePolicy,
        OverlapPolicy,
        Schedule,
        ScheduleFilter,
        ScheduleSpec,
    )
    from jobengine.core.signatures import Signature, SignatureFilter, SignatureStatus
    from jobengine.scheduler import PlanContext

_LAZY = {
    **dict.fromkeys(("Run", "RunFilter", "RunState", "RunSummary", "RunTrigger", "Segment"), "jobengine.core.runs"),
    **dict.fromkeys(
        ("JobTemplate", "MisfirePolicy", "OverlapPolicy", "Schedule", "ScheduleFilter", "ScheduleSpec"),
        "jobengine.core.schedules",
    ),
    **dict.fromkeys(("Signature", "SignatureFilter", "SignatureStatus"), "jobengine.core.signatures"),
    "PlanContext": "jobengine.scheduler",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobengine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AlreadyExists",
    "AmbiguousId",
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
