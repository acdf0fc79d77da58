"""Task handles: what ``@engine.task`` returns, enqueueing with the task's own parameters, and job handles
whose ``result()`` waits for the task's return value.

Usage::

    @engine.task(max_attempts=5)
    async def send_welcome(email: str, lang: str = "en") -> str:
        return f"sent to {email}"

    job = await send_welcome.enqueue("ada@example.com", lang="en")
    print(await job.result(timeout=30))                       # "sent to ada@example.com"
    later = await send_welcome.options(delay=60, priority=5).enqueue("bob@example.com")

The arguments are stored as the job's payload, one JSON object by parameter name
(:mod:`jobengine.worker.arguments`), so ``engine.enqueue("send_welcome", {"email": "..."})`` and the HTTP
API enqueue the same job.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from jobengine.core.models import Job, Json
from jobengine.core.states import JobState
from jobengine.errors import JobFailed
from jobengine.worker.arguments import Parameters
from jobengine.worker.context import JobContext, SyncJobContext

if TYPE_CHECKING:
    from jobengine.engine import Engine
    from jobengine.engine.canvas import TaskCall

P = ParamSpec("P")
R = TypeVar("R")


class JobHandle(Generic[R]):
    """A job enqueued through a :class:`Task`: its ``id``, the ``job`` as stored at enqueue, and its
    result once it has one. Usage::

        handle = await send_welcome.enqueue("ada@example.com")
        value = await handle.result(timeout=30)     # the task's return value
    """

    __slots__ = ("_engine", "_returns", "id", "job")

    def __init__(self, engine: Engine, job: Job, returns: Any = None) -> None:
        self._engine = engine
        self._returns = returns
        self.id: str = job.id
        self.job = job

    def __repr__(self) -> str:
        return f"JobHandle({self.job.task!r}, id={self.id!r})"

    async def result(self, timeout: float = 30.0) -> R:
        """Wait until the job ends; return what the task returned (a pydantic model the task is annotated
        to return is rebuilt from its JSON). JobFailed (with the last error) if it ended dead or
        cancelled; TimeoutError if it has not ended within ``timeout`` seconds (the job goes on)."""
        job = await self._engine.wait_for(self.id, timeout)
        return self._outcome(job)

    def result_sync(self, timeout: float = 30.0) -> R:
        """:meth:`result` for code that is not async (a script, a Django view)::

        print(send_welcome.enqueue_sync("ada@example.com").result_sync(timeout=30))
        """
        job = self._engine._sync(self._engine.wait_for(self.id, timeout))
        return self._outcome(job)

    def _outcome(self, job: Job) -> R:
        self.job = job
        state = job.outcome if job.state is JobState.STALE and job.outcome is not None else job.state
        if state is not JobState.SUCCEEDED:
            raise JobFailed(job)
        model = _model_of(self._returns)
        if model is not None:
            return typing.cast(R, model.model_validate(job.result))
        return typing.cast(R, job.result)


def _model_of(annotation: Any) -> Any:
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(annotation, type) or not issubclass(annotation, pydantic.BaseModel):
        return None
    return annotation


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """Options of one enqueue, besides the task's arguments (those of :meth:`Engine.enqueue`); unset ones
    take the task's defaults."""

    queue: str | None = None
    priority: int | None = None
    run_at: float | datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    depends_on: tuple[str, ...] = field(default=())
    tenant: str = "default"
    timeout: float | None = None
    connection: object | None = None


def _ids(jobs: Sequence[str | Job | JobHandle[Any]]) -> tuple[str, ...]:
    return tuple(j if isinstance(j, str) else j.id for j in jobs)


class Task(Generic[P, R]):
    """A registered task. Calling it calls the function as written (for unit tests: an async task
    returns its coroutine; a context parameter is the caller's to pass); :meth:`enqueue` stores a job
    with these arguments instead. Usage::

        @engine.task(queue="mail")
        async def send_welcome(email: str, lang: str = "en") -> str: ...

        handle = await send_welcome.enqueue("ada@example.com", lang="en")
        send_welcome.enqueue_sync("bob@example.com")          # from code that is not async
        await send_welcome.options(priority=5, delay=60).enqueue("eve@example.com")

    An argument that does not fit the function's parameters is a TypeError naming it; a value that is
    not JSON (or fails its pydantic model) is InvalidJob naming the parameter. Nothing is stored then.
    """

    def __init__(
        self,
        engine: Engine,
        name: str,
        params: Parameters,
        fn: Callable[..., Any] | None,
        returns: Any = None,
        options: TaskOptions | None = None,
    ) -> None:
        self._engine = engine
        self.name = name
        self._params = params
        self._returns = returns
        self._options = options or TaskOptions()
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", name)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"Task({self.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.__wrapped__ is None:
            raise TypeError(f"task {self.name!r} is made of phases: call each phase, or enqueue the task")
        return self.__wrapped__(*args, **kwargs)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Json]:
        """The payload a job of these arguments stores (what :meth:`enqueue` writes), checked as it checks
        them. Usage::

            send_welcome.payload("ada@example.com", lang="en")   # {"email": "ada@example.com", "lang": "en"}
        """
        return self._params.payload(args, kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: float | datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[str | Job | JobHandle[Any]] = (),
        tenant: str = "default",
        timeout: float | None = None,
        connection: object | None = None,
    ) -> Task[P, R]:
        """The same task with these enqueue options added to its own (a new handle; this one is unchanged).
        ``depends_on`` takes job ids, jobs or handles; ``connection``: the caller's own, to enqueue in its
        transaction (see :meth:`Engine.enqueue_many`). Usage::

            await report.options(queue="slow", delay=timedelta(minutes=5), depends_on=[extract]).enqueue(day)
        """
        given: dict[str, Any] = {
            "queue": queue, "priority": priority, "run_at": run_at, "delay": delay, "max_attempts": max_attempts,
            "idempotency_key": idempotency_key, "depends_on": _ids(depends_on) or None,
            "tenant": tenant if tenant != "default" else None, "timeout": timeout, "connection": connection,
        }  # fmt: skip
        opts = replace(self._options, **{k: v for k, v in given.items() if v is not None})
        return Task(self._engine, self.name, self._params, self.__wrapped__, self._returns, opts)

    def s(self, *args: P.args, **kwargs: P.kwargs) -> TaskCall:
        """This call as a node of a graph (:mod:`jobengine.engine.canvas`): the arguments checked
        now, as :meth:`enqueue` checks them, and this handle's queue, priority, attempts and timeout.
        Usage::

            g = chain(fetch.s("https://example.com"), parse.s())
        """
        from jobengine.engine.canvas import TaskCall

        o = self._options
        return TaskCall(self.name, self._params.payload(args, kwargs), queue=o.queue, priority=o.priority,
                         max_attempts=o.max_attempts, timeout=o.timeout)  # fmt: skip

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Store a job that calls the task with these arguments; returns its handle (the existing job's
        for a repeated idempotency key)."""
        payload = self._params.payload(args, kwargs)
        o = self._options
        job = await self._engine.enqueue(
            self.name, payload, queue=o.queue, priority=o.priority, run_at=o.run_at, delay=o.delay,
            max_attempts=o.max_attempts, idempotency_key=o.idempotency_key, depends_on=o.depends_on,
            tenant=o.tenant, timeout=o.timeout, connection=o.connection,
        )  # fmt: skip
        return JobHandle(self._engine, job, self._returns)

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """:meth:`enqueue` for code that is not async (the engine runs it on its own loop)."""
        payload = self._params.payload(args, kwargs)  # a TypeError here, in the caller's thread
        o = self._options
        job = self._engine.enqueue_sync(
            self.name, payload, queue=o.queue, priority=o.priority, run_at=o.run_at, delay=o.delay,
            max_attempts=o.max_attempts, idempotency_key=o.idempotency_key, depends_on=o.depends_on,
            tenant=o.tenant, timeout=o.timeout, connection=o.connection,
        )  # fmt: skip
        return JobHandle(self._engine, job, self._returns)


class TaskDecorator(Protocol):
    """What ``engine.task(...)`` returns: it registers a function and returns its :class:`Task`, typed with
    the function's parameters after a leading context parameter, and its return value (awaited)."""

    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[SyncJobContext, P], R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...
