"""Middleware: hooks around enqueueing and around each attempt a worker runs (for error reporting, tracing,
timing, a user's own metrics).

Subclass :class:`Middleware`, override the hooks you need (plain or ``async def``), and give the instances
to the engine; every hook of every middleware is called in the order the middleware were given::

    class Timing(Middleware):
        def after_attempt(self, job, outcome, seconds, error):
            statsd.timing(f"jobs.{job.task}.{outcome}", seconds)

    engine = Engine.from_settings(settings, middleware=[Timing()])
    engine.middleware.add(SentryHooks())                  # or later, before the worker starts

Failure policy: a hook never changes a job's outcome and never loses a job.

- ``before_enqueue`` is part of the enqueue: if it raises, nothing is stored and the caller gets its error
  (an :class:`~jobengine.errors.InvalidJob` it raises is a 4xx over HTTP). It may return a job to store
  instead (``dataclasses.replace(job, trace=...)``, as :mod:`jobengine.tracing` does).
- every other hook is an observer: what it raises is logged on the ``jobengine.middleware`` logger with its
  traceback and ignored. On the worker the attempt's outcome is recorded before its hooks run, so a hook that
  raises, hangs until a hard stop or is cancelled cannot lose it.

Hooks run on the event loop of the engine or worker (a sync hook blocks it while it runs: keep it quick, or
make it ``async``). ``before_run`` runs in the same context as the task, so a context variable it sets (a
tracing span, an error reporter's scope) is what the task sees, in a thread too for a sync task.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from jobengine.core.models import Job, Json, NewJob

log = logging.getLogger("jobengine.middleware")

#: The hooks, in the order they can happen to one job.
HOOKS: Final = (
    "before_enqueue", "after_enqueue", "before_run", "before_phase", "after_phase", "after_run", "on_failure",
    "on_retry", "on_dead", "after_attempt",
)  # fmt: skip


class Middleware:
    """Hooks around enqueueing and running jobs; each does nothing unless overridden, and each may be a plain
    or an ``async def`` method. See the module's docstring for the failure policy. Usage::

        class Reporter(Middleware):
            async def on_dead(self, job: Job, error: BaseException) -> None:
                await alerts.send(f"{job.task} {job.id} is dead: {error}")

        engine = Engine.from_settings(settings, middleware=[Reporter()])
    """

    def before_enqueue(self, job: NewJob) -> Awaitable[NewJob | None] | NewJob | None:
        """A job is about to be stored (after it was validated). Raising refuses the enqueue (the whole batch
        of an ``enqueue_many``) with that error. Returning a :class:`NewJob` stores that one instead (the next
        middleware sees it); the task's payload check is not run again on it."""
        return None

    def after_enqueue(self, job: Job) -> Awaitable[None] | None:
        """A job was stored (the existing one for a repeated idempotency key); inside a caller's transaction
        (``connection=``) it is written but not yet committed."""
        return None

    def before_run(self, job: Job) -> Awaitable[None] | None:
        """An attempt of ``job`` (``job.attempt``) begins on this worker, before its task is called."""
        return None

    def before_phase(self, job: Job, phase: str, index: int) -> Awaitable[None] | None:
        """A phase of a task with named phases begins (``index`` counts from 0), in the task's context like
        ``before_run``. Not called for a task with one implicit phase, nor for a phase an earlier attempt
        finished (it is skipped)."""
        return None

    def after_phase(self, job: Job, phase: str, index: int, error: BaseException | None) -> Awaitable[None] | None:
        """The phase that ``before_phase`` announced ended: ``error`` is what failed it, None when it succeeded.
        Called also when the attempt is cancelled or stopped during the phase (with that error)."""
        return None

    def after_run(self, job: Job, result: Json) -> Awaitable[None] | None:
        """The attempt succeeded with ``result`` (reported to the store in the worker's next batch)."""
        return None

    def on_failure(self, job: Job, error: BaseException) -> Awaitable[None] | None:
        """The attempt failed with ``error`` (raised by the task, a timeout, an unknown task); then
        ``on_retry`` or ``on_dead`` follows. Not called for a cancelled job."""
        return None

    def on_retry(self, job: Job, error: BaseException, retry_at: float) -> Awaitable[None] | None:
        """The failed job runs again at ``retry_at`` (seconds since the epoch), after its backoff."""
        return None

    def on_dead(self, job: Job, error: BaseException) -> Awaitable[None] | None:
        """The job failed for the last time (attempts used up, or ``NonRetryable``) and goes dead."""
        return None

    def after_attempt(
        self, job: Job, outcome: str, seconds: float, error: BaseException | None
    ) -> Awaitable[None] | None:
        """Last, for every attempt that began: ``outcome`` is ``succeeded``, ``retry``, ``dead``,
        ``cancelled``, ``released`` (handed back at a stop, no attempt spent) or ``lease_lost`` (another
        worker runs it now); ``seconds`` it ran; ``error`` what failed it, if anything."""
        return None


class DeliveryTrace(Protocol):
    """The span of one webhook delivery attempt, begun: ``headers`` go on the request (``traceparent``), and
    ``ended`` ends the span with the attempt's HTTP status (None: no answer) and error."""

    headers: Mapping[str, str]

    def ended(self, status: int | None, error: str | None) -> None: ...


@runtime_checkable
class Traces(Protocol):
    """What a tracing middleware offers beyond its hooks, for the parts of a trace that are not an enqueue or
    an attempt; the graphs service and the webhook dispatcher use the first middleware of the engine that
    has it (:meth:`MiddlewareChain.traces`). :class:`jobengine.tracing.TracingMiddleware` has it."""

    def graph_trace(self, name: str, graph_id: str, tenant: str) -> str | None:
        """The W3C ``traceparent`` a new graph's nodes are enqueued under (None: no trace)."""
        ...

    def delivery(self, event_type: str, parent: str | None, attributes: Mapping[str, str | int]) -> DeliveryTrace:
        """Begin the span of an attempt to deliver an event of ``event_type`` to a webhook endpoint, under
        ``parent`` (the stored traceparent of the event's job; None: a trace of its own)."""
        ...


class MiddlewareChain:
    """The middleware of an engine, in order, with each hook's overriding methods looked up once (a hook no
    middleware overrides costs nothing per job). Usage::

        engine.middleware.add(Timing())
        [type(m).__name__ for m in engine.middleware]     # ["Timing"]
    """

    def __init__(self, middleware: Iterable[Middleware] = ()) -> None:
        self._items: list[Middleware] = []
        self._hooks: dict[str, list[Callable[..., Any]]] = {}
        for item in middleware:
            self.add(item)

    def add(self, middleware: Middleware) -> Middleware:
        """Append ``middleware`` (its hooks run after those added before); returns it. TypeError for an
        object that is not a :class:`Middleware`. A worker reads the chain as it starts."""
        if not isinstance(middleware, Middleware):
            raise TypeError(f"middleware: expected a jobengine Middleware, got {type(middleware).__name__}")
        self._items.append(middleware)
        for hook in HOOKS:
            if getattr(type(middleware), hook) is not getattr(Middleware, hook):
                self._hooks.setdefault(hook, []).append(getattr(middleware, hook))
        return middleware

    def __iter__(self) -> Iterator[Middleware]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def traces(self) -> Traces | None:
        """The first middleware that traces the parts of a trace beyond enqueues and attempts, if any."""
        return next((m for m in self._items if isinstance(m, Traces)), None)

    def wants(self, hook: str) -> bool:
        """Whether any middleware overrides ``hook``."""
        return hook in self._hooks

    async def call(self, hook: str, *args: Any) -> None:
        """Call ``hook`` of every middleware in order; what one raises is logged and the rest still run."""
        if (rest := self.call_now(hook, *args)) is not None:
            await rest

    def call_now(self, hook: str, *args: Any) -> Awaitable[None] | None:
        """:meth:`call` without a coroutine while the hooks are plain: the hooks run now, in order, up to the
        first that returns an awaitable; the awaitable returned then awaits it and calls the rest. None when
        every hook ran (the usual case: a worker calls hooks for every job, and most hooks are plain)."""
        return self._call_from(hook, self._hooks.get(hook, ()), args)

    def _call_from(self, hook: str, fns: Sequence[Callable[..., Any]], args: tuple[Any, ...]) -> Awaitable[None] | None:
        for i, fn in enumerate(fns):
            try:
                returned = fn(*args)
            except Exception:
                _raised(fn, hook)
                continue
            if returned is not None and inspect.isawaitable(returned):
                return self._then(hook, fn, returned, fns[i + 1 :], args)
        return None

    async def _then(
        self, hook: str, fn: Callable[..., Any], pending: Awaitable[Any], rest: Sequence[Callable[..., Any]],
        args: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """Await what the hook ``fn`` returned, then call the hooks ``rest`` after it."""
        try:
            await pending
        except Exception:
            _raised(fn, hook)
        if (more := self._call_from(hook, rest, args)) is not None:
            await more

    async def replace_or_raise(self, hook: str, value: Any) -> Any:
        """Call ``hook`` of every middleware in order on ``value``, each on what the one before returned
        (``value`` itself if it returned None); the first that raises stops the rest, with its error."""
        for fn in self._hooks.get(hook, ()):
            returned = fn(value)
            if inspect.isawaitable(returned):
                returned = await returned
            if returned is not None:
                value = returned
        return value


def _raised(fn: Callable[..., Any], hook: str) -> None:
    """Log what the hook ``fn`` raised (an observer's error is never the job's)."""
    log.exception("middleware %s.%s raised; ignored", type(getattr(fn, "__self__", fn)).__name__, hook)
