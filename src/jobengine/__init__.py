"""jobengine: a durable job engine for Python. Jobs are stored first, leased to one worker, retried with
backoff, dead-lettered, replayable; on SQLite or PostgreSQL. Usage::

    import asyncio
    from jobengine import Engine, JobContext, Settings

    engine = Engine.from_settings(Settings(database="./jobs.db"))

    @engine.task(max_attempts=5)
    async def send_welcome(ctx: JobContext, email: str, lang: str = "en") -> str:
        ctx.progress(0.5, "rendering")
        return f"sent to {email}"

    async def main() -> None:
        async with engine:                                   # applies migrations
            handle = await send_welcome.enqueue("ada@example.com", lang="en")
            worker = engine.worker()                         # usually `jobengine worker --app module:engine`
            running = asyncio.create_task(worker.run())
            print(await handle.result(timeout=30))           # "sent to ada@example.com"
            worker.stop()
            await running

    asyncio.run(main())

The names to start from: :class:`Engine` (tasks, enqueueing, jobs, workers), :class:`Task` (what
``@engine.task`` returns: ``enqueue``, ``enqueue_sync``, ``options``), :class:`JobHandle` (``result``,
``result_sync``), :class:`JobContext` (progress, checkpoints, earlier phases' results, cancellation),
:class:`Settings`, :class:`Middleware` (hooks around enqueueing and each attempt), and the errors
(:class:`JobFailed`, :class:`NonRetryable`, :class:`InvalidJob`...).
``engine.enqueue("send_welcome", {"email": ...})`` enqueues by name, as other languages and the HTTP API do.
Tests run the app's jobs in process with :mod:`jobengine.testing` (``TestEngine(engine)``, ``drain()``,
``testing.context()``).

The public API is what ``__all__`` lists; everything else (the worker protocol, the HTTP layer, the
backends) is private. The scheduler's types (schedules, runs, failure signatures, ``PlanContext``) are
imported when first named (PEP 562): a worker process, which needs none of them, starts without loading
their modules.
"""

from typing import TYPE_CHECKING, Any

from jobengine.core.clock import ManualClock, SystemClock
from jobengine.core.models import Job, JobFilter, NewJob, Phase, PhaseState
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine, JobHandle, Task
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
    JobFailed,
    NonRetryable,
    NotFound,
    StoreError,
    TaskTimeout,
    UnknownDependency,
    UnknownTask,
)
from jobengine.middleware import Middleware
from jobengine.settings import Settings
from jobengine.tasks import phase
from jobengine.version import __version__
from jobengine.worker import JobContext, SyncJobContext, Worker, WorkerOptions

if TYPE_CHECKING:
    from jobengine.core.graphs import GraphState, GraphStatus, Policy
    from jobengine.core.run_requests import PriorityClass, RunMode, RunRequest
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
    from jobengine.engine.canvas import Graph, TaskCall, chain, chord, group
    from jobengine.scheduler import PlanContext

_LAZY = {
    **dict.fromkeys(("Run", "RunFilter", "RunState", "RunSummary", "RunTrigger", "Segment"), "jobengine.core.runs"),
    **dict.fromkeys(
        ("JobTemplate", "MisfirePolicy", "OverlapPolicy", "Schedule", "ScheduleFilter", "ScheduleSpec"),
        "jobengine.core.schedules",
    ),
    **dict.fromkeys(("PriorityClass", "RunMode", "RunRequest"), "jobengine.core.run_requests"),
    **dict.fromkeys(("Signature", "SignatureFilter", "SignatureStatus"), "jobengine.core.signatures"),
    "PlanContext": "jobengine.scheduler",
    **dict.fromkeys(("Graph", "TaskCall", "chain", "chord", "group"), "jobengine.engine.canvas"),
    **dict.fromkeys(("GraphState", "GraphStatus", "Policy"), "jobengine.core.graphs"),
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
    "Graph",
    "GraphState",
    "GraphStatus",
    "IdempotencyConflict",
    "IllegalState",
    "InvalidJob",
    "InvalidSchedule",
    "Job",
    "JobContext",
    "JobEngineError",
    "JobFailed",
    "JobFilter",
    "JobHandle",
    "JobState",
    "JobTemplate",
    "ManualClock",
    "Middleware",
    "MisfirePolicy",
    "NewJob",
    "NonRetryable",
    "NotFound",
    "OverlapPolicy",
    "Phase",
    "PhaseState",
    "PlanContext",
    "Policy",
    "PriorityClass",
    "RetryPolicy",
    "Run",
    "RunFilter",
    "RunMode",
    "RunRequest",
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
    "Task",
    "TaskCall",
    "TaskTimeout",
    "UnknownDependency",
    "UnknownTask",
    "Worker",
    "WorkerOptions",
    "__version__",
    "chain",
    "chord",
    "group",
    "phase",
]
