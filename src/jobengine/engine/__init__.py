"""The Engine: the one facade and composition root.

Every store call goes through here once, so this is where events are published to the bus and workers are
woken; no backend and no feature does that bookkeeping itself. Usage::

    engine = Engine.from_settings(Settings(database="./jobengine.db"))

    @engine.task(max_attempts=5)
    async def greet(ctx):
        return f"hello {ctx.payload['name']}"

    async with engine:
        job = await engine.enqueue("greet", {"name": "Ada"})
        await engine.run_worker()        # until SIGTERM, SIGINT or stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast, get_type_hints, overload

from jobengine.bus import EventBus
from jobengine.core.bounds import MAX_TIME, MAX_TIME_ISO, check_text, check_time
from jobengine.core.clock import Clock, SystemClock
from jobengine.core.ids import JobId
from jobengine.core.locations import describe_store, describe_transport
from jobengine.core.models import Event, Job, JobFilter, Json, NewJob, Pruned, check_name
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine.compose import open_rate_limiter, open_store
from jobengine.engine.event_log import EventLog
from jobengine.engine.flow import FlowControl
from jobengine.engine.handles import JobHandle, Task, TaskDecorator
from jobengine.engine.health import Health
from jobengine.engine.keys import Keys
from jobengine.engine.periodic import Periodic
from jobengine.engine.queues import Queues, QueueSettingsCache
from jobengine.engine.requests import Requests
from jobengine.engine.selection import JobSelection
from jobengine.engine.transitions import Transitions
from jobengine.errors import ConfigError, IllegalState, InvalidJob, NotFound
from jobengine.fleet import Fleet
from jobengine.middleware import Middleware, MiddlewareChain
from jobengine.ports.auth import IdempotencyStore, KeyStore, SessionStore
from jobengine.ports.deadletter import DeadLetterStore
from jobengine.ports.eventlog import EventLogStore, EventPruneStore, SettlingEventLog
from jobengine.ports.flow import FlowStore
from jobengine.ports.notifier import Notifier
from jobengine.ports.queues import QueueSettingsStore
from jobengine.ports.store import Store
from jobengine.ports.watermarks import Watermark
from jobengine.settings import Settings
from jobengine.tasks import PhaseSpec, TaskFn, TaskRegistry, make_spec
from jobengine.worker.arguments import adapt_task
from jobengine.worker.context import JobContext, SyncJobContext
from jobengine.worker.runtime import Worker, WorkerOptions

# The scheduler's modules are imported where first used, not here: a worker process never loads them
# (tests/unit/test_worker_process.py).
if TYPE_CHECKING:
    from jobengine.core.run_requests import RunRequest
    from jobengine.core.schedules import ScheduleSpec
    from jobengine.delivery.transports import Transports
    from jobengine.engine.graphs import Graphs
    from jobengine.engine.results import Results
    from jobengine.packs.registry import PackRegistry
    from jobengine.ports.schedules import PlannedRun
    from jobengine.ports.transactional import TransactionalStore
    from jobengine.ports.watermarks import WatermarkStore
    from jobengine.ports.webhooks import WebhookStore
    from jobengine.scheduler.pack_runs import PackRuns
    from jobengine.scheduler.passes import SchedulerPasses
    from jobengine.scheduler.planning import PlannerRegistry
    from jobengine.scheduler.requests import RunTask
    from jobengine.scheduler.runs import Runs
    from jobengine.scheduler.schedules import Schedules
    from jobengine.scheduler.signatures import Signatures
    from jobengine.webhooks.manager import Webhooks

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
__all__ = ["Engine", "JobHandle", "Task"]


def _returns(fn: Callable[..., Any]) -> Any:
    """The return annotation of ``fn`` when it can be resolved (a pydantic model is rebuilt from it)."""
    try:
        return get_type_hints(fn).get("return")
    except Exception:  # an annotation the type checker alone can resolve: results stay JSON
        return None


def _seconds(value: float | datetime | timedelta | None, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return check_time(field, value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise InvalidJob(field, f"expected seconds, a datetime or a timedelta, got {value!r}")


class Engine:
    """The one facade: tasks, enqueueing, jobs and their results, workers, and the services beside them
    (``schedules``, ``runs``, ``webhooks``, ``flow``, ``keys``...), and the ``middleware`` around enqueueing and
    each attempt. Build it from settings; use it as an async context manager (it applies migrations at start
    and closes the store at exit). Usage::

        engine = Engine.from_settings(Settings(database="postgresql://localhost/jobs"))

        @engine.task(queue="mail")
        async def send_welcome(email: str) -> str: ...

        async with engine:
            handle = await send_welcome.enqueue("ada@example.com")
            job = await engine.get_job(handle.id)
    """

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        clock: Clock | None = None,
        *,
        tasks: TaskRegistry | None = None,
        bus: EventBus | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        """``tasks`` / ``bus``: share another engine's task registry and event bus (the services hold them from
        here on, so they are given now, never assigned later). ``middleware``: hooks around enqueueing and
        each attempt (:mod:`jobengine.middleware`); another engine's chain is shared, not copied."""
        self.store = store
        self.settings = settings or Settings()
        self.clock: Clock = clock or SystemClock()
        self.tasks = tasks if tasks is not None else TaskRegistry()
        self.bus = bus if bus is not None else EventBus()
        #: The hooks around enqueueing and each attempt, in order (:mod:`jobengine.middleware`); ``add`` more
        #: before a worker starts.
        self.middleware = middleware if isinstance(middleware, MiddlewareChain) else MiddlewareChain(middleware)
        if self.settings.tracing and self.middleware.traces() is None:
            from jobengine.tracing import TracingMiddleware  # the otel extra, only when tracing is on

            self.middleware.add(TracingMiddleware())
        self._notifier: Notifier | None = None
        self._portal: _Portal | None = None
        self._results: Results | None = None
        self._workers: list[Worker] = []
        self._closed = False
        self._webhook_store: WebhookStore | None = None
        self._planners: PlannerRegistry | None = None
        # Every backend implements these ports; the store is handed to each service typed as the ones it uses.
        s = self.settings
        self.keys = Keys(cast(KeyStore, store), cast(SessionStore, store), self.clock, ids=store,
                         session_seconds=s.dashboard_session_seconds)  # fmt: skip
        self.requests = Requests(cast(IdempotencyStore, store), self.clock, ttl=s.idempotency_ttl)
        queue_settings = QueueSettingsCache(cast(QueueSettingsStore, store))
        self.flow = FlowControl(cast(FlowStore, store), store, queue_settings.read, self.clock, s, notify=self._notify)
        self.queues = Queues(store, cast(DeadLetterStore, store), queue_settings, self.flow, self.clock,
                             notify=self._notify, publish=self._published)  # fmt: skip
        # Only some logs number events out of commit order (the store says so in its capabilities).
        self.event_log = EventLog(
            store, cast(EventLogStore, store), self.bus, self.clock, s,
            settling=cast(SettlingEventLog, store) if store.capabilities.settled_events else None,
            pruning=cast(EventPruneStore, store),
        )  # fmt: skip
        self.health = Health(store, lambda: self.transports.health())
        #: The live workers: who runs what, and the rescue of dead ones (their jobs fail through the
        #: transitions, which exist by the time the fleet rescues).
        self.fleet = Fleet(
            store.workers(), self.clock, expiry=self.settings.lease_seconds,
            fail_jobs=lambda failures: self.transitions.fail_jobs(failures),
        )  # fmt: skip
        #: Jobs by a prefix of their id, and actions on many jobs at once (:mod:`.selection`).
        self.jobs = JobSelection(self)
        #: The worker protocol: every transition of a running job, instrumented (:mod:`.transitions`).
        self.transitions = Transitions(
            store, self.clock, self.tasks, self.bus, notifier=self.notifier, fleet=self.fleet,
            flow=self.flow, runs=lambda: self.runs, signatures=lambda: self.signatures, graphs=lambda: self.graphs,
        )  # fmt: skip

    @classmethod
    def from_settings(
        cls, settings: Settings, clock: Clock | None = None, *, middleware: Iterable[Middleware] = ()
    ) -> Engine:
        """An engine on the store ``settings.database`` names. Usage::

        engine = Engine.from_settings(Settings.load(), middleware=[Timing()])
        """
        return cls(open_store(settings.database, settings), settings, clock, middleware=middleware)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Apply pending migrations; with a broker transport, start the outbox relay. Idempotent."""
        self._closed = False
        await self.store.migrate()
        if self.settings.queue.broker:
            await self.transports.start()

    async def close(self) -> None:
        """Stop the workers, close the transports, the notifier and the store; then the sync facade's loop,
        if a sync call started one. Idempotent."""
        await self._close_parts()
        portal, self._portal = self._portal, None
        if portal is not None:
            portal.close()

    async def _close_parts(self) -> None:
        self._closed = True
        for worker in self._workers:
            worker.stop()
        if "transports" in self.__dict__:  # built (cached_property): close what it opened
            await self.transports.close()
        if self._webhook_store is not None:
            await self._webhook_store.close()
        if self._results is not None:
            await self._results.close()
        if self._notifier is not None:
            await self._notifier.close()
        await self.store.close()

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __enter__(self) -> Engine:
        """``async with`` for code that is not async: starts the engine (migrations, the outbox relay) on the
        sync facade's own loop, and closes it there on exit. Usage::

            with Engine.from_settings(Settings.load()) as engine:
                engine.enqueue_sync("send_welcome", {"email": "ada@example.com"})
        """
        self._portal_run(self.start())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        portal, self._portal = self._portal, None
        if portal is None:
            return
        try:
            portal.run(self._close_parts())  # an error closing is the caller's to see, as with ``async with``
        finally:
            portal.close()

    @cached_property
    def transports(self) -> Transports:
        """The queue transports of ``settings.queue`` (planner, runner), their metrics and health."""
        from jobengine.delivery.transports import Transports

        return Transports(self)

    @cached_property
    def packs(self) -> PackRegistry:
        """The task pack registry (:mod:`jobengine.packs`); ConfigError if the store keeps no packs."""
        from jobengine.packs.registry import registry_for

        blobs = self.store.blob_store(self.settings)
        return registry_for(self.store, blobs, self.settings, self.clock)

    def webhook_store(self) -> WebhookStore:
        """The webhook port of this engine's store (jobengine.webhooks)."""
        if self._webhook_store is None:
            self._webhook_store = self.store.webhook_store(self.settings)
        return self._webhook_store

    @cached_property
    def webhooks(self) -> Webhooks:
        """Webhook endpoints, deliveries and inbound hooks (:class:`jobengine.webhooks.manager.Webhooks`)."""
        from jobengine.webhooks.manager import Webhooks

        s = self.settings
        return Webhooks(self, lambda: open_rate_limiter(s.webhook_rate_limiter, s.webhook_redis_url))

    def notifier(self) -> Notifier:
        if self._notifier is None:
            self._notifier = self.store.notifier()
        return self._notifier

    # -- the scheduler's services (built when first used: a worker running plain jobs never needs them) --
    @cached_property
    def schedules(self) -> Schedules:
        """Schedules and the planners their templates name (:class:`jobengine.scheduler.schedules.Schedules`)."""
        from jobengine.scheduler.schedules import Schedules

        return Schedules(
            self.store.scheduling(), ids=self.store, clock=self.clock, tasks=self.tasks,
            planners=self._planner_registry(), published=self._published, jobs_created=self._jobs_created,
            pack_template=self._pack_template, plan_request=self._plan_request,
        )  # fmt: skip

    async def _plan_request(self, request: RunRequest, tenant: str, now: float, actor: str | None) -> PlannedRun:
        return await self.runs.plan(request, tenant, now, actor)

    @cached_property
    def runs(self) -> Runs:
        """Runs of schedules: history, cancel, retry (:class:`jobengine.scheduler.runs.Runs`)."""
        from jobengine.scheduler.runs import Runs

        return Runs(
            self.store.scheduling(), jobs=self.store, clock=self.clock, tasks=self.tasks,
            published=self._published, jobs_created=self._jobs_created, run_retention=self.settings.run_retention,
            run_task=self._run_task,
            cancel_graph=self._cancel_graph,
        )  # fmt: skip

    async def _cancel_graph(self, graph_id: str, tenant: str | None) -> None:
        """A run that fired a graph is cancelled: so is its graph (which ends ``cancelled``, not ``failed``)."""
        with contextlib.suppress(IllegalState):  # the graph already ended: its run has nothing left to stop
            await self.graphs.cancel(graph_id, tenant)

    @cached_property
    def pack_runs(self) -> PackRuns:
        """Simulations of pending pack versions and what their approval shows
        (:class:`jobengine.scheduler.pack_runs.PackRuns`). Usage::

        run = await engine.pack_runs.simulate("scores", "1.1.0", actor="key:ann")
        """
        from jobengine.scheduler.pack_runs import PackRuns

        return PackRuns(lambda: self.packs, self.runs)

    async def _run_task(self, request: RunRequest) -> RunTask:
        """What a run request's jobs run: a pack's task pinned to an approved version's digest (a pending
        one's too in a simulate run); any other task as it is named."""
        from jobengine.core.run_modes import RunMode
        from jobengine.scheduler.requests import RunTask

        if "@" not in request.task:
            return RunTask(request.task)
        from jobengine.packs.jobs import resolve_task

        found = await resolve_task(self.packs, request.task, pending=request.mode is RunMode.SIMULATE)
        if found is None:
            return RunTask(request.task)
        v = found.version
        pack: dict[str, Json] = {"name": v.name, "version": v.version, "sha256": v.sha256,
                                 "task": request.task.rpartition(":")[2]}  # fmt: skip
        queue = found.spec.get("queue")
        return RunTask(found.task, queue if isinstance(queue, str) else None, pack)

    @cached_property
    def graphs(self) -> Graphs:
        """Graphs of jobs: submit, status, cancel, retry (:class:`jobengine.engine.graphs.Graphs`). Usage::

        handle = await engine.graphs.submit(chain(fetch.s(url), parse.s()))
        print((await handle.wait(timeout=60)).state)
        """
        from jobengine.engine.graphs import Graphs

        return Graphs(
            self.store, self.store.graphs(), self.clock, new_job=self.new_job, prepare=self._prepare,
            published=self._published, jobs_created=self._jobs_created, runs=lambda: self.runs,
            traces=self.middleware.traces,
        )  # fmt: skip

    @cached_property
    def signatures(self) -> Signatures:
        """Failure signatures (:class:`jobengine.scheduler.signatures.Signatures`)."""
        from jobengine.scheduler.signatures import Signatures

        return Signatures(
            self.store.scheduling(), jobs=self.store, clock=self.clock, published=self._published,
            cache_seconds=self.settings.signature_cache_seconds,
        )  # fmt: skip

    @cached_property
    def scheduler(self) -> SchedulerPasses:
        """The scheduler's passes and leaders (:class:`jobengine.scheduler.passes.SchedulerPasses`), which
        a :class:`~jobengine.scheduler.loop.SchedulerLoop` drives."""
        from jobengine.scheduler.passes import SchedulerPasses

        return SchedulerPasses(
            self.store.scheduling(), jobs=self.store, clock=self.clock, tasks=self.tasks,
            planners=self._planner_registry(), runs=self.runs, published=self._published,
            jobs_created=self._jobs_created, leaders=self.store.leader,
            misfire_grace=self.settings.scheduler_misfire_grace,
        )  # fmt: skip

    def _planner_registry(self) -> PlannerRegistry:
        if self._planners is None:
            from jobengine.scheduler.planning import PlannerRegistry

            self._planners = PlannerRegistry()
        return self._planners

    async def _pack_template(self, spec: ScheduleSpec) -> ScheduleSpec:
        from jobengine.packs.jobs import resolve_schedule

        return await resolve_schedule(self.packs, spec)

    async def _jobs_created(self, jobs: Sequence[Job]) -> None:
        """A run's jobs were written (with the run, not through ``enqueue_many``): wake this process's
        workers, and with a broker transport publish their messages. They have no outbox row (the tick's
        transaction writes the jobs itself), so a message lost here is published again by the relay's
        sweep of overdue jobs. A graph's blocked nodes are left out: they are queued when their parents end."""
        jobs = [j for j in jobs if j.state is not JobState.BLOCKED]
        if not jobs:
            return
        self.notifier().notify()
        if self.settings.queue.broker:
            await self.transports.publish_jobs(jobs, "scheduled")

    @cached_property
    def periodic(self) -> Periodic:
        """Schedules declared in code (:mod:`jobengine.engine.periodic`): as a decorator of a task, or called
        with ``task=``. Every worker and scheduler of the app creates or updates them as it starts. Usage::

            @engine.periodic("*/5 * * * *", tz="Europe/Paris")
            @engine.task
            async def send_report() -> None: ...

            engine.periodic("0 * * * *", task=send_report, name="hourly-report")
        """
        return Periodic(self)

    # -- tasks --------------------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[Concatenate[SyncJobContext, P], R], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        name: str | None = None,
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> TaskDecorator: ...
    def task(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Register the decorated function (async, or sync to run in a thread) as a task named after it (or
        ``name``) and return its :class:`~jobengine.engine.handles.Task`. The task's parameters are its
        job's arguments; one annotated ``JobContext`` (first, for the type checker) receives the context.
        Usage::

            @engine.task(queue="mail", max_attempts=5)
            async def send_welcome(ctx: JobContext, email: str, lang: str = "en") -> str:
                return f"sent to {email}"

            handle = await send_welcome.enqueue("ada@example.com", lang="en")
        """
        if callable(name):
            return self.task()(name)

        def register(fn: Callable[..., Any]) -> Any:
            return self.add_task(
                name or fn.__name__, fn, queue=queue, priority=priority, max_attempts=max_attempts,
                timeout=timeout, retry=retry,
            )  # fmt: skip

        return register

    def add_task(
        self,
        name: str,
        fn: TaskFn | None = None,
        *,
        phases: Sequence[TaskFn | PhaseSpec] | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Task[..., Any]:
        """Register a task from a function, or from ordered ``phases``, and return its handle. A phase takes
        the task's arguments it names (each keyword-only at enqueue) and the context, and returns its
        result; the job's result is the phases' results by name. Usage::

            async def extract(source: str, ctx: JobContext) -> dict: ...
            async def load(ctx: JobContext) -> int: ...

            etl = engine.add_task("etl", phases=[extract, load])
            await etl.enqueue(source="s3://bucket/day")
        """
        check_name("task", name)
        adapted, adapted_phases, params = adapt_task(name, fn, phases)
        spec = make_spec(name, adapted, adapted_phases, queue=queue, priority=priority, max_attempts=max_attempts,
                         timeout=timeout, retry=retry)  # fmt: skip
        if params.takes_arguments:
            spec = replace(spec, check_payload=params.check)
        self.tasks.add(spec)
        return Task(self, name, params, fn, _returns(fn) if fn is not None and not phases else None)

    # -- enqueue ------------------------------------------------------------------------------------
    def new_job(
        self,
        task: str,
        payload: Json = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: float | datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[str] = (),
        tenant: str = "default",
        timeout: float | None = None,
    ) -> NewJob:
        """Build a job request with the task's defaults filled in (for :meth:`enqueue_many`)."""
        spec = self.tasks.get(task)
        at = None
        if run_at is not None or delay is not None:
            at = _seconds(run_at, "run_at")
            wait = _seconds(delay, "delay")
            if at is not None and wait is not None:
                raise InvalidJob("delay", "give run_at or delay, not both")
            if wait is not None:
                if not wait >= 0:
                    raise InvalidJob("delay", "must be >= 0 seconds")
                if not self.clock.now() + wait <= MAX_TIME:
                    raise InvalidJob("delay", f"must end by {MAX_TIME_ISO}")
                at = self.clock.now() + wait
        # By position, in NewJob's field order (checked at import, above): this runs for every job enqueued
        # (docs/decisions/0020-positional-construction.md).
        return NewJob(
            task,
            payload,
            queue if queue is not None else (spec.queue if spec else "default"),
            priority if priority is not None else (spec.priority if spec else 0),
            at,
            max_attempts if max_attempts is not None else (spec.max_attempts if spec else 3),
            idempotency_key,
            () if depends_on == () else cast("tuple[JobId, ...]", tuple(depends_on)),
            tenant,
            timeout,
        )

    async def enqueue(
        self,
        task: str,
        payload: Json = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: float | datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[str] = (),
        tenant: str = "default",
        timeout: float | None = None,
        connection: object | None = None,
        watermark: Watermark | None = None,
    ) -> Job:
        """Store one job and wake a worker. Returns the job (the existing one for a repeated
        idempotency key). Raises InvalidJob, IdempotencyConflict, UnknownDependency; an option it does not
        know is a TypeError naming it (and a mypy error). The options are :meth:`new_job`'s;
        ``connection`` and ``watermark``: see :meth:`enqueue_many`. Usage::

            job = await engine.enqueue("send_email", {"to": "ada@example.com"}, priority=5, delay=60)
        """
        job = self.new_job(
            task, payload, queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts,
            idempotency_key=idempotency_key, depends_on=depends_on, tenant=tenant, timeout=timeout,
        )  # fmt: skip
        marks = {job.id: [watermark]} if watermark is not None else None
        return (await self.enqueue_many([job], connection=connection, watermarks=marks))[0]

    async def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: object | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> list[Job]:
        """Store a batch in one transaction: all of it, or (on any error) none of it.

        ``connection``: the caller's own open connection (PostgreSQL: a ``psycopg.AsyncConnection``, or a
        sync ``psycopg.Connection``) to write the jobs in the caller's transaction, together with its data:
        rolled back, they never existed; committed, they run (:mod:`jobengine.integrations` finds it in a
        SQLAlchemy session or Django). Their events are not published on the in-process bus, because the transaction
        may still roll back; they are in the store's event log once it commits. Usage::

            async with conn.transaction():
                await conn.execute("INSERT INTO orders ...")
                await engine.enqueue("ship_order", {"order": 7}, connection=conn)

        ``watermarks``: per job id, the watermarks the job carries (:mod:`jobengine.ports.watermarks`).
        Both need a store that supports them (PostgreSQL); others raise ConfigError.

        The middleware's ``before_enqueue`` hooks see each validated job before anything is written (one that
        raises refuses the batch with its error), its ``after_enqueue`` hooks each stored job.
        """
        if not jobs:
            return []
        jobs, phases = await self._prepare(jobs)
        stored = await self._insert(jobs, phases, connection, watermarks)
        hooks = self.middleware
        if hooks.wants("after_enqueue"):
            for done in stored:
                await hooks.call("after_enqueue", done)
        return stored

    async def _insert(
        self,
        jobs: Sequence[NewJob],
        phases: list[tuple[str, ...]],
        connection: object | None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None,
    ) -> list[Job]:
        now = self.clock.now()
        store = self.store
        if self.settings.queue.broker:  # jobs and their outbox rows in one transaction (jobengine.delivery)
            return await self.transports.enqueue(jobs, now, phases, connection=connection, watermarks=watermarks)
        if connection is not None:
            if not store.capabilities.transactional_enqueue:
                raise ConfigError("connection: this store cannot enqueue inside a caller's transaction")
            inserted = await cast("TransactionalStore", store).insert_jobs_in(
                connection, jobs, now, phases, watermarks=watermarks
            )
            return inserted.jobs
        if watermarks:
            if not store.capabilities.watermarks:
                raise ConfigError("watermark: this store does not keep watermarks")
            inserted = await cast("WatermarkStore", store).insert_jobs(jobs, now, phases, watermarks=watermarks)
        else:
            inserted = await store.insert_jobs(jobs, now, phases)
        self._published(inserted.events)
        if any(j.state in (JobState.QUEUED,) for j in inserted.jobs):
            self.notifier().notify()
        return inserted.jobs

    async def enqueue_for(self, tenant: str, jobs: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        """Enqueue jobs of ``tenant`` (all or none); each with whether it was created (False: an existing
        job with the same idempotency key). A dependency on another tenant's job is UnknownDependency (the
        store refuses it, as for every enqueue)."""
        for job in jobs:
            if job.tenant != tenant:
                raise InvalidJob("tenant", "a job must belong to the caller's tenant")
        stored = await self.enqueue_many(jobs)
        return [(job, job.id == new.id) for job, new in zip(stored, jobs, strict=True)]

    def enqueue_sync(
        self,
        task: str,
        payload: Json = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: float | datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[str] = (),
        tenant: str = "default",
        timeout: float | None = None,
        connection: object | None = None,
        watermark: Watermark | None = None,
    ) -> Job:
        """:meth:`enqueue` for code that is not async (a Django view, a script), with the same options;
        ``connection`` here is a sync one (PostgreSQL: a ``psycopg.Connection``). Usage::

            job = engine.enqueue_sync("send_welcome", {"email": "ada@example.com"}, delay=60)
        """
        return self._sync(
            self.enqueue(
                task, payload, queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts,
                idempotency_key=idempotency_key, depends_on=depends_on, tenant=tenant, timeout=timeout,
                connection=connection, watermark=watermark,
            )
        )  # fmt: skip

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[Job]:
        """:meth:`enqueue_many` for code that is not async; ``connection`` as in :meth:`enqueue_sync`. Usage::

        engine.enqueue_many_sync([engine.new_job("resize", {"image": n}) for n in range(10)])
        """
        return self._sync(self.enqueue_many(jobs, connection=connection))

    async def _prepare(self, jobs: Sequence[NewJob]) -> tuple[Sequence[NewJob], list[tuple[str, ...]]]:
        """The checks of every enqueue (a graph's too), before anything is written: pack tasks resolved,
        unknown tasks refused (when the settings say so), payloads checked, the middleware's ``before_enqueue``
        hooks called, flow control admitted; and the phase names of each job's task."""
        tasks = {j.task for j in jobs}  # a few names: checked and looked up once each, not per job
        if any("@" in t for t in tasks):  # a pack's task: resolved to an approved version's digest
            from jobengine.packs.jobs import resolve_jobs

            jobs = await resolve_jobs(self.packs, jobs)
            tasks = {j.task for j in jobs}
        if self.settings.refuse_unknown_tasks:
            await self._refuse_unknown(tasks)
        self._check_payloads(jobs, tasks)
        hooks = self.middleware
        if hooks.wants("before_enqueue"):
            jobs = [await hooks.replace_or_raise("before_enqueue", job) for job in jobs]
        await self.flow.admit(jobs)  # flow control: QueueFull / Overloaded before anything is written
        names = {task: self.tasks.phase_names(task) for task in tasks}
        return jobs, [names[j.task] for j in jobs]

    def _check_payloads(self, jobs: Sequence[NewJob], tasks: set[str]) -> None:
        """InvalidJob naming the field for a payload that cannot be the arguments of a task this process
        registered with named arguments (a handle's enqueue made it right already; a name's may not)."""
        checks = {t: c for t in tasks if (spec := self.tasks.get(t)) is not None and (c := spec.check_payload)}
        if checks:
            for job in jobs:
                check = checks.get(job.task)
                if check is not None:
                    check(job.payload)

    async def _refuse_unknown(self, tasks: set[str]) -> None:
        """InvalidJob naming ``task`` for a task that neither this process nor any live worker runs (a pack
        task was resolved to an approved version already)."""
        unknown = {t for t in tasks if "@" not in t and self.tasks.get(t) is None}
        if unknown:
            unknown -= await self.fleet.known_tasks()
        if unknown:
            name = sorted(unknown)[0]
            raise InvalidJob("task", f"no worker runs task {name!r} (refuse_unknown_tasks is on)")

    # -- managing jobs ------------------------------------------------------------------------------
    async def get_job(self, job_id: str, tenant: str | None = None) -> Job:
        jobs = await self.store.get_jobs([JobId(job_id)], tenant)
        if not jobs:
            raise NotFound("job", job_id)
        return jobs[0]

    async def get_jobs(self, ids: Sequence[str], tenant: str | None = None) -> list[Job]:
        """The jobs among ``ids`` that exist (and belong to ``tenant``), in the order asked for."""
        return await self.store.get_jobs([JobId(i) for i in ids], tenant) if ids else []

    async def list_jobs(self, filter: JobFilter | None = None) -> list[Job]:
        return await self.store.list_jobs(filter or JobFilter())

    async def count_jobs(self, tenant: str | None = None, *, finished: bool = True) -> dict[tuple[str, JobState], int]:
        """Job counts by (queue, state); ``finished=False`` leaves the finished jobs out, and costs only what
        the unfinished ones do."""
        return await self.store.count_jobs(tenant, finished=finished)

    async def cancel(self, job_id: str, reason: str = "cancelled by user", tenant: str | None = None) -> Job:
        """Cancel a job that has not run yet at once; ask a running one to stop (it ends ``cancelled``).
        InvalidJob (``reason``) for text no backend can store."""
        check_text("reason", reason)
        job = await self.get_job(job_id, tenant)
        if job.terminal:
            raise IllegalState(f"job {job_id} is already {job.state.value}; nothing to cancel")
        await self.jobs.cancel([job.id], reason, tenant)
        return await self.get_job(job_id, tenant)

    async def retry(self, job_id: str, tenant: str | None = None) -> Job:
        """Queue a dead, cancelled or failed job again now, with a fresh attempt budget (replay)."""
        job = await self.get_job(job_id, tenant)
        if job.state not in (JobState.DEAD, JobState.CANCELLED, JobState.FAILED):
            raise IllegalState(f"job {job_id} is {job.state.value}; only dead, cancelled or failed jobs can be retried")
        return await self._queue_again(job, tenant)

    async def replay(self, job_id: str, tenant: str | None = None) -> Job:
        """Queue a dead job again with a fresh attempt budget. IllegalState if it is not dead."""
        job = await self.get_job(job_id, tenant)
        if job.state is not JobState.DEAD:
            raise IllegalState(f"job {job_id} is {job.state.value}; only a dead job can be replayed")
        return await self._queue_again(job, tenant)

    async def _queue_again(self, job: Job, tenant: str | None) -> Job:
        await self.jobs.requeue([job.id], tenant)
        return await self.get_job(job.id, tenant)

    async def events(
        self, after_id: int = 0, limit: int = 100, job_id: str | None = None, tenant: str | None = None
    ) -> list[Event]:
        """Events with id > ``after_id``, oldest first (of one job / one tenant when given)."""
        return await self.store.list_events(after_id, limit, JobId(job_id) if job_id else None, tenant)

    async def wait_for(self, job_id: str, timeout: float = 30.0, poll: float = 5.0) -> Job:
        """The job once it is terminal (succeeded, dead, cancelled), woken by the store's notification that
        it finished, from whichever process ran it (:mod:`jobengine.engine.results`); a task's handle does
        this in ``result()``. TimeoutError after ``timeout`` seconds, NotFound for a job that does not exist.
        ``poll``: the longest the job goes unread when no notification comes (a safety net, not the way it
        is answered). Usage::

            job = await engine.wait_for(job.id, timeout=60)
            print(job.state, job.result)
        """
        if self._results is None:
            from jobengine.engine.results import Results

            self._results = Results(self.store, self.bus, self.store.finished_notifier)
        return await self._results.wait(JobId(job_id), timeout, poll)

    def wait_for_sync(self, job_id: str, timeout: float = 30.0) -> Job:
        """:meth:`wait_for` for code that is not async (a script), on the loop ``enqueue_sync`` uses."""
        return self._sync(self.wait_for(job_id, timeout))

    # -- maintenance ---------------------------------------------------------------------------------
    async def prune(self, limit: int = 10_000) -> Pruned:
        now = self.clock.now()
        s = self.settings
        pruned = await self.store.prune_jobs(now - s.stale_after, now - s.delete_after, now, limit)
        self._published(pruned.events)
        return pruned

    # -- workers ------------------------------------------------------------------------------------
    def worker(self, **overrides: Any) -> Worker:
        """A worker configured from settings; keyword arguments override :class:`WorkerOptions` fields."""
        s = self.settings
        options = WorkerOptions(
            queues=s.worker_queues, concurrency=s.worker_concurrency, lease_seconds=s.lease_seconds,
            heartbeat_every=s.heartbeat_every, poll_interval=s.poll_interval, rescue_interval=s.rescue_interval,
            grace_period=s.grace_period, fetch_batch=s.fetch_batch, prefetch=s.worker_prefetch,
            flush_spacing=s.worker_flush_spacing,
            liveness_interval=s.liveness_interval,
            setup=(("store", describe_store(s.database, s.postgres_schema)),
                   ("transport", describe_transport(s.queue))),
        )  # fmt: skip
        for key in overrides:
            if not hasattr(options, key):
                raise ConfigError(f"{key}: not a worker option")
        source = self.transports.source() if self.settings.queue.broker else self.transitions
        worker = Worker(source, replace(options, **overrides), self.middleware)
        self._workers.append(worker)
        if self._closed:  # close() came while run_worker() was syncing schedules: it must not outlive the engine
            worker.stop()
        return worker

    async def run_worker(self, **overrides: Any) -> None:
        """Run a worker (:meth:`worker`) until it is stopped, after syncing the schedules declared in code
        (:attr:`periodic`). In the main thread, SIGTERM and SIGINT stop it as they stop ``jobengine worker``:
        the first gracefully, a second at once; it then returns, so the script that awaits it ends with exit
        code 0 instead of being killed by the signal."""
        await self.periodic.sync()
        worker = self.worker(**overrides)
        loop = asyncio.get_running_loop()
        # Signal handlers can only be installed from the main thread; elsewhere stop() is the only way out.
        signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
        for sig in signals:
            loop.add_signal_handler(sig, worker.stop)
        try:
            await worker.run()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    # -- internals ----------------------------------------------------------------------------------
    def _published(self, events: Sequence[Event]) -> None:
        if events:
            self.bus.publish(events)

    def _notify(self) -> None:
        self.notifier().notify()

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the sync facade's loop. The first call on a store that
        ``migrates_on_first_use`` applies pending migrations first; elsewhere a missing table is an error
        naming ``jobengine migrate``."""
        if self._portal is None and self.store.capabilities.migrates_on_first_use:
            coro = _after(self.store.migrate(), coro)
        return self._portal_run(coro)

    def _portal_run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._portal is None:
            self._portal = _Portal()
            # Closes what the loop holds when the engine is collected unclosed, or at interpreter exit if it is
            # still open: a loop dropped with its driver's tasks pending prints "Task was destroyed but it
            # is pending!" once per task. A weak reference, so the finalizer does not keep the engine alive.
            self._portal.finalizer = weakref.finalize(self, _shut_portal, self._portal, weakref.ref(self))
        return self._portal.run(coro)


class _Portal:
    """A private event loop in a daemon thread that runs coroutines for synchronous callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jobengine-portal", daemon=True)
        self._thread.start()
        self.finalizer: weakref.finalize[..., Any] | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("enqueue_sync called from inside the engine's own loop; use await enqueue()")
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("the engine is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        """Cancel what is still running in the loop (a driver's background tasks), wait for it, then stop:
        a loop stopped with pending tasks would destroy them unfinished."""
        if self.finalizer is not None:
            self.finalizer.detach()
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()


def _shut_portal(portal: _Portal, engine: weakref.ref[Engine]) -> None:
    """The finalizer of an engine never closed: close what it holds on the portal's loop (when it is still
    alive: interpreter exit), then the loop. At exit a part may fail to close (the interpreter's executors
    are shut down by then); the loop's cancellation still ends its tasks, and the process ends the rest."""
    alive = engine()
    if alive is not None:
        with contextlib.suppress(Exception):
            portal.run(alive._close_parts(), timeout=10)
    portal.close()


async def _after(first: Coroutine[Any, Any, object], then: Coroutine[Any, Any, T]) -> T:
    try:
        await first
    except BaseException:
        then.close()  # never awaited: closed, so that it warns of nothing
        raise
    return await then


async def _cancel_the_rest() -> None:
    this = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not this]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=4)
    await asyncio.get_running_loop().shutdown_asyncgens()
