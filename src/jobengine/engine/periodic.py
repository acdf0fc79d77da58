"""Schedules declared in code: ``@engine.periodic(...)`` keeps a schedule's declaration on the engine, and every
worker and scheduler of the app makes the stored schedule say what the code says as it starts. Usage::

    @engine.periodic("*/5 * * * *", tz="Europe/Paris")
    @engine.task(queue="reports")
    async def send_report(kind: str = "short") -> None: ...

    engine.periodic("0 * * * *", task=send_report, name="hourly-report", kwargs={"kind": "full"})
    engine.periodic("0 2 * * *", graph=chain(extract.s(), load.s()), name="nightly-etl")   # fires a graph

At start (``jobengine worker``, ``jobengine scheduler``, ``jobengine up``, ``engine.run_worker()``), each
declared schedule is created if missing, updated once when the declaration changed (the version goes up and
a ``schedule.updated`` event by the actor ``code`` names the fields), and left alone when equal, however many
replicas start together (:meth:`~jobengine.scheduler.schedules.Schedules.declare`). Firing is the
scheduler's as for any schedule: each tick once.

A schedule's name is its identity: renaming a declaration creates a new schedule. A schedule declared once
and no longer in the code is left as it is (replicas still running the previous release declare it, and
would fight a deletion): a starting process that declares schedules logs each such one at INFO, and
``jobengine schedules delete NAME`` removes it. Pausing and resuming stay the operator's: a declared
schedule paused from the dashboard stays paused when the app starts again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from jobengine.core.models import Json
from jobengine.engine.handles import Task
from jobengine.errors import InvalidSchedule
from jobengine.worker.context import JobContext, SyncJobContext

# The schedule values are imported when something is declared: a worker of plain jobs never loads them.
if TYPE_CHECKING:
    from jobengine.core.request_template import RequestTemplate
    from jobengine.core.schedules import MisfirePolicy, OverlapPolicy, Schedule, ScheduleSpec, Template
    from jobengine.engine import Engine
    from jobengine.engine.canvas import Graph
    from jobengine.scheduler.schedules import Declared

log = logging.getLogger("jobengine.scheduler")

P = ParamSpec("P")
R = TypeVar("R")


class PeriodicDecorator(Protocol):
    """What ``engine.periodic(...)`` returns without ``task``: it declares the schedule of the decorated task
    handle (or registers the decorated function as a task first) and returns the handle."""

    @overload
    def __call__(self, fn: Task[P, R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[SyncJobContext, P], R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class Periodic:
    """The schedules an engine declares in code (``engine.periodic``), and their sync with the store.

    Call it to declare one: ``cron`` (or ``every``, seconds or ``"30s"``), ``tz`` (IANA name), ``name``
    (default: the task's), the job's arguments as ``args`` / ``kwargs`` for a task handle (checked as
    ``enqueue`` checks them) or ``payload`` for a task given by name, and the template's ``queue``,
    ``priority``, ``max_attempts`` and the schedule's ``overlap``, ``misfire``, ``catch_up``, ``jitter``,
    ``tenant``. Bad input raises InvalidSchedule naming the field (a TypeError for arguments that do not fit
    the task) when the declaration runs, at import. Usage::

        @engine.periodic("*/5 * * * *", tz="Europe/Paris")
        @engine.task
        async def send_report() -> None: ...

        engine.periodic(every="30s", task="cleanup", payload={"older_than": 3600})
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._declared: dict[tuple[str, str], ScheduleSpec] = {}

    @overload
    def __call__(
        self,
        cron: str | None = None,
        *,
        task: Task[..., Any] | str,
        name: str | None = None,
        tz: str = "UTC",
        every: float | str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        payload: Json = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        overlap: OverlapPolicy | str = "allow",
        misfire: MisfirePolicy | str = "skip",
        catch_up: int = 0,
        jitter: float | str = 0.0,
        tenant: str = "default",
    ) -> ScheduleSpec: ...
    @overload
    def __call__(
        self,
        cron: str | None = None,
        *,
        request: RequestTemplate,
        name: str | None = None,
        tz: str = "UTC",
        every: float | str | None = None,
        overlap: OverlapPolicy | str = "allow",
        misfire: MisfirePolicy | str = "skip",
        catch_up: int = 0,
        jitter: float | str = 0.0,
        tenant: str = "default",
    ) -> ScheduleSpec: ...
    @overload
    def __call__(
        self,
        cron: str | None = None,
        *,
        graph: Graph,
        name: str,
        tz: str = "UTC",
        every: float | str | None = None,
        overlap: OverlapPolicy | str = "allow",
        misfire: MisfirePolicy | str = "skip",
        catch_up: int = 0,
        jitter: float | str = 0.0,
        tenant: str = "default",
    ) -> ScheduleSpec: ...
    @overload
    def __call__(
        self,
        cron: str | None = None,
        *,
        task: None = None,
        name: str | None = None,
        tz: str = "UTC",
        every: float | str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        payload: Json = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        overlap: OverlapPolicy | str = "allow",
        misfire: MisfirePolicy | str = "skip",
        catch_up: int = 0,
        jitter: float | str = 0.0,
        tenant: str = "default",
    ) -> PeriodicDecorator: ...
    def __call__(
        self,
        cron: str | None = None,
        *,
        task: Task[..., Any] | str | None = None,
        graph: Graph | None = None,
        request: RequestTemplate | None = None,
        name: str | None = None,
        tz: str = "UTC",
        every: float | str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        payload: Json = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        overlap: OverlapPolicy | str = "allow",
        misfire: MisfirePolicy | str = "skip",
        catch_up: int = 0,
        jitter: float | str = 0.0,
        tenant: str = "default",
    ) -> Any:
        """Declare a schedule of ``task`` (or of ``graph``: each tick fires it; or of ``request``: each tick
        starts its run, named after its task unless ``name`` is given) and return its spec; without any, a
        decorator that declares one of the task it decorates and returns the task's handle."""
        from jobengine.core.schedules import JobTemplate, ScheduleSpec

        def declare(target: Task[..., Any] | str) -> ScheduleSpec:
            task_name = target if isinstance(target, str) else target.name
            job_payload = payload
            if args or kwargs:
                if payload is not None:
                    raise InvalidSchedule("payload", "give args / kwargs or payload, not both")
                if isinstance(target, str):
                    raise InvalidSchedule("args", "a task given by name takes payload=, not args / kwargs")
                job_payload = target.payload(*args, **(kwargs or {}))
            elif not isinstance(target, str):
                if payload is None:
                    job_payload = target.payload()  # the task's defaults: checked now, not at the first tick
                elif (registered := self._engine.tasks.get(target.name)) and registered.check_payload:
                    registered.check_payload(payload)
            template = JobTemplate(task=task_name, payload=job_payload, queue=queue, priority=priority,
                                   max_attempts=max_attempts)  # fmt: skip
            spec = ScheduleSpec(
                name=name or task_name, template=template, cron=cron, every=every, timezone=tz,  # type: ignore[arg-type]
                overlap=overlap, misfire=misfire, catch_up=catch_up, jitter=jitter, tenant=tenant,  # type: ignore[arg-type]
            )  # fmt: skip
            return self.declare(spec)

        def whole(template: Template, kind: str, what: str, default_name: str | None) -> ScheduleSpec:
            """A schedule of a template given whole: the job options belong to the template, not here."""
            if task is not None or (graph is not None and request is not None):
                raise InvalidSchedule(kind, "give one of task=, graph= and request=")
            options = {"args": args, "kwargs": kwargs, "payload": payload, "queue": queue, "priority": priority,
                       "max_attempts": max_attempts}  # fmt: skip
            for option, value in options.items():
                if value:
                    raise InvalidSchedule(option, f"{what} carry their own arguments and options")
            if (name or default_name) is None:
                raise InvalidSchedule("name", f"a schedule of a {kind} needs name=")
            spec = ScheduleSpec(
                name=name or default_name, template=template, cron=cron, every=every, timezone=tz,  # type: ignore[arg-type]
                overlap=overlap, misfire=misfire, catch_up=catch_up, jitter=jitter, tenant=tenant,  # type: ignore[arg-type]
            )  # fmt: skip
            return self.declare(spec)

        if graph is not None:
            return whole(graph.as_template(), "graph", "a graph's nodes", None)
        if request is not None:
            return whole(request, "request", "a run request's jobs", request.task)
        if task is not None:
            return declare(task)

        def decorate(fn: Callable[..., Any]) -> Task[..., Any]:
            handle = fn if isinstance(fn, Task) else self._engine.task(fn)
            declare(handle)
            return handle

        return decorate

    def declare(self, spec: ScheduleSpec) -> ScheduleSpec:
        """Declare a schedule given whole (any template: items, a planner). InvalidSchedule naming ``name`` if
        another declaration already has its name in its tenant. Usage::

            engine.periodic.declare(ScheduleSpec(name="nightly", cron="30 2 * * *",
                                                 template=JobTemplate(task="report", items=("eu", "us"))))
        """
        key = (spec.tenant, spec.name)
        if self._declared.get(key, spec) != spec:
            raise InvalidSchedule("name", f"schedule {spec.name!r} is declared twice; give each its own name=")
        self._declared[key] = spec
        return spec

    @property
    def declared(self) -> tuple[ScheduleSpec, ...]:
        """The declared schedules, in the order they were declared."""
        return tuple(self._declared.values())

    async def sync(self) -> list[tuple[Schedule, Declared]]:
        """Make the stored schedules match the declared ones (each created, updated or left alone) and log
        those once declared that no longer are; nothing to do (and no scheduler module loaded) when none is
        declared. Workers and schedulers call it as they start; errors (the store is away) propagate."""
        if not self._declared:
            return []
        from jobengine.core.schedules import DECLARED_BY, ScheduleFilter

        schedules = self._engine.schedules
        done = []
        for spec in self._declared.values():
            schedule, outcome = await schedules.declare(spec)
            if outcome != "unchanged":
                log.info("schedule %s %s from code (version %d)", spec.name, outcome, schedule.version)
            done.append((schedule, outcome))
        for stored in await schedules.list(ScheduleFilter(limit=100_000)):
            if stored.created_by == DECLARED_BY and (stored.tenant, stored.name) not in self._declared:
                log.info(
                    "schedule %s was declared in code and no longer is; left as it is "
                    "(`jobengine schedules delete %s` removes it)", stored.name, stored.name,
                )  # fmt: skip
        return done
