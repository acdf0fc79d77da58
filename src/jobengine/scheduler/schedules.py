"""Schedules: create, read, update, delete, pause, resume, trigger by hand, simulate; and the planners
their templates name.

Every change is audited: its event (``schedule.created`` ...) carries ``actor``, is written in the same
transaction as the change, and lands in the event log with the job events. A schedule is named by its id
or by its name (within ``tenant``; ``default`` when not given). Usage::

    schedule = await engine.schedules.create(
        ScheduleSpec(name="digest", cron="0 8 * * MON-FRI", timezone="Europe/Paris",
                     template=JobTemplate(task="mail.digest")),
        actor="alice",
    )
    await engine.schedules.update("digest", cron="0 9 * * MON-FRI", actor="bob")
    preview = await engine.schedules.simulate("digest", count=5)   # writes nothing
    run = await engine.schedules.trigger("digest", reason="re-send after the outage", actor="carol")

Bad input raises InvalidSchedule naming the field; an unknown schedule NotFound; a name already taken
AlreadyExists; a concurrent change of the same schedule IllegalState (read it again and retry).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import fields, replace
from datetime import datetime
from typing import Any, Final, Literal, TypeVar

from jobengine.core import schedules as sc
from jobengine.core.bounds import check_json, check_text, check_time
from jobengine.core.clock import Clock
from jobengine.core.graph_template import GraphTemplate
from jobengine.core.ids import IdKind, RunId, ScheduleId, new_run_id, new_schedule_id
from jobengine.core.mapping import TriggerMapping
from jobengine.core.models import Event, Job, Json
from jobengine.core.request_template import RequestTemplate
from jobengine.core.runs import Run, RunState, RunTrigger
from jobengine.core.schedules import JobTemplate, Schedule, ScheduleFilter, ScheduleSpec
from jobengine.errors import AlreadyExists, IllegalState, InvalidJob, InvalidSchedule, NotFound
from jobengine.ports.ids import IdIndex, resolve_id
from jobengine.ports.schedules import PlannedRun, SchedulingStore
from jobengine.scheduler.planning import (
    PlannerFn,
    PlannerRegistry,
    PlanRequest,
    SimulatedRun,
    Simulation,
    new_run,
    plan_run,
)
from jobengine.tasks import TaskRegistry

MAX_SIMULATION: Final = 1000
#: Fields whose change moves the cursor to now and recomputes the next fire time.
_CADENCE: Final = frozenset({"cron", "every", "timezone", "enabled"})

#: Reads and compare-and-sets a declaration may lose to other replicas declaring the same schedule at once:
#: each loss means another replica wrote the schedule, so the next read usually finds it as declared.
_DECLARE_TRIES: Final = 10

P = TypeVar("P", bound=PlannerFn)
#: What :meth:`Schedules.declare` did to the stored schedule.
Declared = Literal["created", "updated", "unchanged"]

#: Publishes events the store wrote (on the engine's in-process bus).
Published = Callable[[Sequence[Event]], None]
#: Announces jobs written with a run (wakes workers; publishes them to a broker).
JobsCreated = Callable[[Sequence[Job]], Awaitable[None]]
#: Pins a template naming a pack's task (``hello@1.2.0:greet``) to an approved version's digest.
PackTemplate = Callable[[ScheduleSpec], Awaitable[ScheduleSpec]]


class Schedules:
    """The schedules of one engine's store, with the planner functions of this process.

    ``planners`` is shared with the scheduler's passes (:class:`~jobengine.scheduler.passes.SchedulerPasses`),
    which plan the runs that fire."""

    def __init__(
        self,
        store: SchedulingStore,
        *,
        ids: IdIndex,
        clock: Clock,
        tasks: TaskRegistry,
        planners: PlannerRegistry,
        published: Published,
        jobs_created: JobsCreated,
        pack_template: PackTemplate,
        plan_request: PlanRequest | None = None,
    ) -> None:
        """``plan_request``: plans the run of a schedule whose template is a run request (``engine.runs``)."""
        self._store = store
        self._plan_request = plan_request
        self._ids = ids
        self._clock = clock
        self._tasks = tasks
        self.planners = planners
        self._published = published
        self._jobs_created = jobs_created
        self._pack_template = pack_template
        self._on_change: list[Callable[[], None]] = []

    # -- planners -----------------------------------------------------------------------------------
    def planner(self, name: str | None = None) -> Callable[[P], P]:
        """Register the decorated function (sync or async, ``fn(ctx: PlanContext) -> list``) as a planner
        that a schedule's template names: it returns the items of each run at fire time. Usage::

            @engine.schedules.planner("regions")
            def regions(ctx: PlanContext) -> list[str]:
                return ["eu", "us"]
        """

        def register(fn: P) -> P:
            self.planners.add(name or fn.__name__, fn)
            return fn

        return register

    def add_planner(self, name: str, fn: PlannerFn) -> None:
        """Register ``fn`` as the planner ``name`` (ConfigError if the name is taken)."""
        self.planners.add(name, fn)

    def on_changed(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` after a schedule changed in this process (the scheduler loop wakes up)."""
        self._on_change.append(fn)

    # -- CRUD ---------------------------------------------------------------------------------------
    async def create(self, spec: ScheduleSpec, *, actor: str = "system") -> Schedule:
        """Store a new schedule; it first fires at its first tick after now."""
        sc.check_actor(actor)
        spec = await self._pinned(spec)
        now = self._clock.now()
        schedule = Schedule(
            id=new_schedule_id(), spec=spec, version=1, cursor=now, next_fire_at=sc.first_fire(spec, now),
            created_at=now, updated_at=now, created_by=actor, updated_by=actor,
        )  # fmt: skip
        event = sc.schedule_event(sc.SCHEDULE_CREATED, schedule, actor, spec=spec.to_json())
        schedule, events = await self._store.insert_schedule(schedule, event)
        self._published(events)
        self._changed()
        return schedule

    async def declare(self, spec: ScheduleSpec, *, actor: str = sc.DECLARED_BY) -> tuple[Schedule, Declared]:
        """Make the stored schedule named ``spec.name`` (in ``spec.tenant``) say what ``spec`` says: create it
        when missing, update the fields that differ (one ``schedule.updated`` event naming them, the
        version one up), leave it alone when equal. Whether it is paused is not compared
        (:data:`~jobengine.core.schedules.DECLARED_FIELDS`). Usage::

            schedule, outcome = await engine.schedules.declare(spec)   # "created", "updated" or "unchanged"

        Every replica of an app may declare the same spec at once: a create that loses to another's (the
        name is unique) or an update that loses (the version is compared and set) reads the schedule again
        and compares, so it is created once and updated once. IllegalState if it keeps changing under it."""
        sc.check_actor(actor)
        wanted = await self._pinned(spec)
        for _ in range(_DECLARE_TRIES):
            current = await self._store.find_schedule(spec.tenant, spec.name)
            try:
                if current is None:
                    return await self.create(spec, actor=actor), "created"
                differ = sc.declared_changes(current.spec, wanted)
                if not differ:
                    return current, "unchanged"
                changes = {name: getattr(spec, name) for name in differ}
                return await self._change(
                    current.id, spec.tenant, actor, changes, sc.SCHEDULE_UPDATED, current
                ), "updated"
            except (AlreadyExists, IllegalState, NotFound):
                continue  # another replica wrote it (or deleted it) meanwhile: read it again
        raise IllegalState(f"schedule {spec.name!r} kept changing while it was declared; start again")

    async def get(self, ref: str, tenant: str | None = None) -> Schedule:
        """By id, else by name in ``tenant`` (``default`` when None), else by a unique prefix of its id
        (:func:`~jobengine.ports.ids.resolve_id`). Raises NotFound, or AmbiguousId naming a few."""
        found = await self._store.get_schedules([ScheduleId(ref)], tenant)
        if found:
            return found[0]
        by_name = await self._store.find_schedule(tenant or "default", ref)
        if by_name is not None:
            return by_name
        try:
            schedule_id = ScheduleId(await resolve_id(self._ids, IdKind.SCHEDULE, ref, tenant))
        except InvalidJob:  # a name nobody gave, with characters no id has (``/``, ``@``)
            raise NotFound("schedule", ref) from None
        found = await self._store.get_schedules([schedule_id])
        if not found:
            raise NotFound("schedule", ref)
        return found[0]

    async def list(self, filter: ScheduleFilter | None = None) -> builtins.list[Schedule]:
        return await self._store.list_schedules(filter or ScheduleFilter())

    async def update(self, ref: str, *, tenant: str | None = None, actor: str = "system", **changes: Any) -> Schedule:
        """Change fields of the spec (``cron``, ``every``, ``timezone``, ``template`` (a JobTemplate or a
        mapping), ``overlap``, ``misfire``, ``catch_up``, ``jitter``, ``enabled``, ``name``). Giving ``cron``
        clears ``every`` and the reverse. A new cadence applies from now: ticks before are not fired."""
        sc.check_actor(actor)
        if not changes:
            raise InvalidSchedule("changes", "give at least one field to change")
        return await self._change(ref, tenant, actor, changes, sc.SCHEDULE_UPDATED)

    async def pause(self, ref: str, *, tenant: str | None = None, actor: str = "system") -> Schedule:
        """Stop firing (runs already going continue). Ticks while paused are never fired."""
        sc.check_actor(actor)
        return await self._change(ref, tenant, actor, {"enabled": False}, sc.SCHEDULE_PAUSED)

    async def resume(self, ref: str, *, tenant: str | None = None, actor: str = "system") -> Schedule:
        """Fire again from the next tick after now (not the ticks missed while paused)."""
        sc.check_actor(actor)
        return await self._change(ref, tenant, actor, {"enabled": True}, sc.SCHEDULE_RESUMED)

    async def delete(self, ref: str, *, tenant: str | None = None, actor: str = "system") -> None:
        """Delete the schedule; its runs and their jobs stay (history), and go on if still running."""
        sc.check_actor(actor)
        schedule = await self.get(ref, tenant)
        event = sc.schedule_event(sc.SCHEDULE_DELETED, schedule, actor)
        events = await self._store.delete_schedule(schedule.id, tenant, self._clock.now(), event)
        self._published(events)
        self._changed()

    async def trigger(
        self,
        ref: str,
        *,
        reason: str,
        tenant: str | None = None,
        actor: str = "system",
        data: Json = None,
        mapping: TriggerMapping | None = None,
    ) -> Run:
        """Fire a run now, by hand (also when paused; the overlap policy does not apply to it).

        ``data``: JSON that comes with the trigger (an inbound hook's event): kept on the run
        (``Run.trigger_data``) and handed to the template's planner (``PlanContext.trigger_data``);
        ``mapping`` sets parts of it into the jobs' payload or items (:mod:`jobengine.core.mapping`). Data
        the mapping cannot take raises InvalidSchedule naming the place in it (``body/ref``); nothing is
        written then."""
        sc.check_actor(actor)
        if not isinstance(reason, str) or not 1 <= len(reason) <= 1000:
            raise InvalidSchedule("reason", "say why, in 1-1000 characters")
        check_text("reason", reason)
        check_json("data", data)
        schedule = await self.get(ref, tenant)
        spec = schedule.spec
        if mapping is not None:
            spec = replace(spec, template=mapping.apply(spec.template, data))
        now = self._clock.now()
        planned = await self._plan(
            schedule.id, spec, new_run_id(), RunTrigger.MANUAL, now, reason=reason, actor=actor, trigger_data=data
        )
        fired = await self._store.insert_run(planned, now)
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        return fired.runs[0]

    async def simulate(
        self,
        schedule: ScheduleSpec | str,
        *,
        count: int = 10,
        after: float | datetime | None = None,
        tenant: str | None = None,
    ) -> Simulation:
        """The next ``count`` fire times of a stored schedule (by id or name) or a proposed spec, and the
        jobs each run would have: planners are called with ``dry_run`` True. Writes nothing."""
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SIMULATION:
            raise InvalidSchedule("count", f"must be an integer from 1 to {MAX_SIMULATION}")
        start = None if after is None else check_time("after", after)
        if isinstance(schedule, ScheduleSpec):
            spec, schedule_id = schedule, ScheduleId("simulation")
            start = self._clock.now() if start is None else start
        else:
            stored = await self.get(schedule, tenant)
            spec, schedule_id = stored.spec, stored.id
            start = max(stored.cursor, self._clock.now()) if start is None else start
        cadence = spec.cadence()
        times: list[float] = []
        t: float | None = start
        while len(times) < count and t is not None:
            t = cadence.next_after(t)
            if t is not None:
                times.append(t)
        runs = []
        for tick in times:
            planned = await self._plan(
                schedule_id, spec, new_run_id(), RunTrigger.SCHEDULE, tick, tick=tick, dry_run=True
            )
            error = planned.run.reason if planned.run.state is RunState.ERROR else None
            runs.append(SimulatedRun(tick, planned.jobs, planned.items, planned.run.no_work, error))
        return Simulation(spec, tuple(times), tuple(runs))

    # -- internals ----------------------------------------------------------------------------------
    async def _plan(
        self,
        schedule_id: ScheduleId,
        spec: ScheduleSpec,
        run_id: RunId,
        trigger: RunTrigger,
        now: float,
        *,
        dry_run: bool = False,
        **run_fields: Any,
    ) -> PlannedRun:
        run = new_run(run_id, schedule_id, spec.tenant, trigger, now, **run_fields)
        return await plan_run(self.planners, self._tasks, run, spec, dry_run=dry_run, plan_request=self._plan_request)

    async def _pinned(self, spec: ScheduleSpec) -> ScheduleSpec:
        """A template naming a pack's task must name an approved version; it is pinned to that version's
        digest (:mod:`jobengine.packs.jobs`). A run request template is pinned at each tick instead, as every
        run request is (``engine.runs``)."""
        if isinstance(spec.template, RequestTemplate) or "@" not in (sc.template_task(spec.template) or ""):
            return spec
        return await self._pack_template(spec)

    async def _change(
        self,
        ref: str,
        tenant: str | None,
        actor: str,
        changes: Mapping[str, Any],
        event_type: str,
        current: Schedule | None = None,
    ) -> Schedule:
        """``current``: the schedule as the caller read it; the change is refused (IllegalState) if it is no
        longer the stored version."""
        if current is None:
            current = await self.get(ref, tenant)
        spec = _changed_spec(current.spec, changes)
        if "template" in changes:
            spec = await self._pinned(spec)
        now = self._clock.now()
        schedule = replace(current, spec=spec, version=current.version + 1, updated_at=now, updated_by=actor)
        if _CADENCE & set(changes):
            cursor = max(current.cursor, now)  # never back: a tick already handled must not fire again
            schedule = replace(schedule, cursor=cursor, next_fire_at=sc.first_fire(spec, cursor))
        event = sc.schedule_event(event_type, schedule, actor, changes=sorted(changes), spec=spec.to_json())
        schedule, events = await self._store.update_schedule(schedule, current.version, event)
        self._published(events)
        self._changed()
        return schedule

    def _changed(self) -> None:
        for fn in self._on_change:
            fn()


def _changed_spec(spec: ScheduleSpec, changes: Mapping[str, Any]) -> ScheduleSpec:
    known = {f.name for f in fields(ScheduleSpec)} - {"tenant"}
    values = dict(changes)
    for key in values:
        if key not in known:
            raise InvalidSchedule(key, f"not a field that can change (one of {', '.join(sorted(known))})")
    if values.get("cron") is not None and "every" not in values:
        values["every"] = None
    if values.get("every") is not None and "cron" not in values:
        values["cron"] = None
    template = values.get("template")
    if template is not None and not isinstance(template, JobTemplate | GraphTemplate | RequestTemplate):
        values["template"] = sc.template_from_json(template)
    return replace(spec, **values)
