"""Every error jobengine raises on purpose.

    JobEngineError
    ├── ConfigError             settings that cannot work (bad value, unknown backend)
    ├── InvalidJob (ValueError) a NewJob field is wrong; ``field`` names it
    │   └── InvalidSchedule     a schedule field is wrong (a subclass, so every handler of bad input
    │                           catches both); ``field`` names it (``cron``, ``timezone``, ``template.task``)
    ├── UnknownTask             a job names a task no one registered
    ├── NotFound                no such job, schedule, run or signature (or not in this tenant)
    ├── AmbiguousId             an id prefix names several jobs (runs, …); ``candidates`` lists some
    ├── AlreadyExists           a schedule name already used in the tenant
    ├── IdempotencyConflict     same idempotency key, different request
    ├── UnknownDependency       depends_on names a job that does not exist
    ├── IllegalState            the action does not apply to the job's state (e.g. retry a running job)
    ├── StoreError              the store failed (driver error, translated at the seam)
    │   └── StoreUnavailable    cannot reach / open the store
    ├── TransportError          a queue transport (Redis, NATS) refused a request
    │   └── TransportUnavailable  cannot reach the broker (the caller retries)
    ├── FlowRefused             flow control refused new work (nothing was written); retry after
    │   ├── QueueFull           the queue's depth is past its hard limit (HTTP 429)
    │   └── Overloaded          the service sheds low-priority work while saturated (HTTP 503)
    └── JobFailed               a job whose result was awaited ended dead or cancelled; ``job`` is it

Exceptions a *task* raises to steer its own job (not errors of the engine):

    NonRetryable   the job goes to ``dead`` at once, whatever attempts remain
    └── ResultsTooLarge  a graph node's parents' results are past the limit it may receive
    TaskTimeout    recorded as the error of an attempt that ran past its timeout
    Cancelled      raised inside a task by ``ctx.raise_if_cancelled()``; the job ends ``cancelled``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobengine.core.models import AttemptError, Job


class JobEngineError(Exception):
    """Base of every error raised by jobengine itself."""


class ConfigError(JobEngineError):
    pass


class InvalidJob(JobEngineError, ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidSchedule(InvalidJob):
    """A schedule (or its job template) is refused; ``field`` names the field, ``message`` says why."""


class AlreadyExists(JobEngineError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} already exists")
        self.what = what
        self.ident = ident


class UnknownTask(JobEngineError):
    def __init__(self, task: str) -> None:
        super().__init__(f"task: no task named {task!r} is registered")
        self.task = task


class NotFound(JobEngineError):
    """Nothing has this id (or name); ``hint``, when given, says what would have found one."""

    def __init__(self, what: str, ident: str, hint: str = "") -> None:
        super().__init__(f"{what} {ident!r} not found" + (f" ({hint})" if hint else ""))
        self.what = what
        self.ident = ident


class AmbiguousId(JobEngineError):
    """A prefix given for an id matches more than one; ``candidates``: a few of the ids it matches."""

    def __init__(self, what: str, prefix: str, candidates: list[str]) -> None:
        shown = ", ".join(candidates)
        super().__init__(f"{what}_id: {prefix!r} is the start of several {what} ids ({shown}); give more characters")
        self.what = what
        self.prefix = prefix
        self.candidates = candidates
        self.message = str(self)


class IdempotencyConflict(JobEngineError):
    def __init__(self, key: str, existing_id: str) -> None:
        super().__init__(
            f"idempotency_key: {key!r} already names job {existing_id} with a different task, queue or payload"
        )
        self.key = key
        self.existing_id = existing_id


class UnknownDependency(JobEngineError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"depends_on: job {job_id!r} does not exist")
        self.job_id = job_id


class IllegalState(JobEngineError):
    pass


class StoreError(JobEngineError):
    pass


class StoreUnavailable(StoreError):
    pass


class TransportError(JobEngineError):
    pass


class TransportUnavailable(TransportError):
    pass


class FlowRefused(JobEngineError):
    """New work refused by flow control; nothing was written. ``retry_after``: seconds to wait."""

    def __init__(self, message: str, *, queue: str, retry_after: float) -> None:
        super().__init__(message)
        self.queue = queue
        self.retry_after = retry_after


class QueueFull(FlowRefused):
    """The queue holds ``depth`` runnable jobs and ``hard_limit`` is its most."""

    def __init__(self, queue: str, depth: int, hard_limit: int, retry_after: float) -> None:
        super().__init__(
            f"queue: {queue!r} holds {depth} runnable jobs, its hard limit is {hard_limit}",
            queue=queue,
            retry_after=retry_after,
        )
        self.depth = depth
        self.hard_limit = hard_limit


class Overloaded(FlowRefused):
    """The service is saturated (``reasons``: depth, in_flight, latency) and the job's priority is below
    ``min_priority``."""

    def __init__(self, queue: str, priority: int, min_priority: int, reasons: tuple[str, ...], retry_after: float):
        super().__init__(
            f"priority: the service is saturated ({', '.join(reasons)}); jobs below priority {min_priority} "
            f"are refused for now (this one has {priority})",
            queue=queue,
            retry_after=retry_after,
        )
        self.priority = priority
        self.min_priority = min_priority
        self.reasons = reasons


class JobFailed(JobEngineError):
    """The job a caller waited on ended without a result: ``dead`` or ``cancelled`` (``state``). ``job`` is
    the job as it ended, ``error`` its last attempt's error (None for a job cancelled before it ran)::

        try:
            await handle.result(timeout=30)
        except JobFailed as exc:
            print(exc.state, exc.error.type if exc.error else exc.job.reason)
    """

    def __init__(self, job: Job) -> None:
        state = job.outcome if job.outcome is not None else job.state
        self.job = job
        self.state = state.value
        self.error: AttemptError | None = job.errors[-1] if job.errors else None
        why = f"{self.error.type}: {self.error.message}" if self.error else (job.reason or "no error recorded")
        super().__init__(f"job {job.id} ({job.task}) ended {self.state}: {why}")


class NonRetryable(Exception):
    """Raise from a task to send its job straight to ``dead``: retrying cannot help."""


class ResultsTooLarge(NonRetryable):
    """The results a graph node would receive from its parents are past the limit
    (:data:`jobengine.core.graphs.MAX_PARENT_RESULTS`): the node goes dead at once, as another attempt
    would read the same results."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the parents' results are {size} bytes as JSON, past the {limit} bytes a graph node may receive; "
            "pass a reference (a path, a key) instead of the data"
        )
        self.size = size
        self.limit = limit


class TaskTimeout(Exception):
    """The attempt ran longer than the task's timeout (a failed attempt, retried like any other)."""


class Cancelled(Exception):
    """Raised inside a task when its job was cancelled (see ``JobContext.raise_if_cancelled``)."""
