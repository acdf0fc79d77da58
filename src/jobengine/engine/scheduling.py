"""What the scheduler's parts of the Engine facade share (``engine.schedules``, ``engine.runs``,
``engine.signatures``): the scheduling store of the engine's store, planner functions, leaders.

Mixed into :class:`~jobengine.engine.Engine` (kept apart only to keep each module small); callers see one
facade. A store that does not offer the scheduling ports (:class:`SchedulingBackend`) makes every
schedule method raise ConfigError naming the feature, and the job paths skip the run and signature
bookkeeping (no job of such a store belongs to a run).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Event, Job, Json
from jobengine.errors import ConfigError
from jobengine.ports.leader import Leader

# The scheduler's modules are imported where first used, not here: a worker process never loads them
# (tests/unit/test_worker_process.py).
if TYPE_CHECKING:
    from jobengine.bus import EventBus
    from jobengine.core.clock import Clock
    from jobengine.core.runs import Run, RunTrigger
    from jobengine.core.schedules import ScheduleSpec
    from jobengine.delivery.transports import Transports
    from jobengine.packs.registry import PackRegistry
    from jobengine.ports.notifier import Notifier
    from jobengine.ports.schedules import PlannedRun, SchedulingBackend, SchedulingStore
    from jobengine.ports.store import Store
    from jobengine.scheduler.planning import PlannerFn, PlannerRegistry
    from jobengine.settings import Settings
    from jobengine.tasks import TaskRegistry

log = logging.getLogger("jobengine.scheduler")

P = TypeVar("P", bound="PlannerFn")


def _planner_registry() -> PlannerRegistry:
    from jobengine.scheduler.planning import PlannerRegistry

    return PlannerRegistry()


def _backend(store: object) -> SchedulingBackend | None:
    """``store`` if it offers the scheduling ports, else None."""
    from jobengine.ports.schedules import SchedulingBackend

    return store if isinstance(store, SchedulingBackend) else None


@dataclass
class _SchedulingState:
    planners: PlannerRegistry = field(default_factory=_planner_registry)
    store: SchedulingStore | None = None
    #: Runs this process saw start, so a claim of their next segments does not write again (bounded).
    started: dict[RunId, None] = field(default_factory=dict)
    #: (tenant, key) of non-retryable signatures, and when they were read.
    non_retryable: set[tuple[str, str]] = field(default_factory=set)
    non_retryable_keys: frozenset[str] = frozenset()
    non_retryable_at: float = float("-inf")
    on_change: list[Callable[[], None]] = field(default_factory=list)


class SchedulingBase:
    # Provided by Engine.
    store: Store
    settings: Settings
    clock: Clock
    bus: EventBus
    tasks: TaskRegistry
    _scheduling_state: _SchedulingState | None = None

    if TYPE_CHECKING:

        def _published(self, events: Sequence[Event]) -> None: ...

        def notifier(self) -> Notifier: ...

        @property
        def transports(self) -> Transports: ...

        @property
        def packs(self) -> PackRegistry: ...

    def _sched(self) -> _SchedulingState:
        if self._scheduling_state is None:
            self._scheduling_state = _SchedulingState()
        return self._scheduling_state

    def _scheduling(self) -> SchedulingStore:
        """The scheduling ports of the store; ConfigError when it has none."""
        state = self._sched()
        if state.store is None:
            backend = _backend(self.store)
            if backend is None:
                raise ConfigError("database: this store does not support schedules, runs or failure signatures")
            state.store = backend.scheduling()
        return state.store

    def _scheduling_or_none(self) -> SchedulingStore | None:
        state = self._sched()
        if state.store is None and (backend := _backend(self.store)) is not None:
            state.store = backend.scheduling()
        return state.store

    def leader(self, name: str) -> Leader:
        """A :class:`Leader` for ``name`` among every process of this engine's database (a lease row on
        SQLite, an advisory lock on PostgreSQL, always this process in memory)."""
        backend = _backend(self.store)
        if backend is None:
            raise ConfigError("database: this store offers no leader election")
        return backend.leader(name)

    # -- planners -----------------------------------------------------------------------------------
    @property
    def planners(self) -> PlannerRegistry:
        return self._sched().planners

    def planner(self, name: str | None = None) -> Callable[[P], P]:
        """Register the decorated function (sync or async, ``fn(ctx: PlanContext) -> list``) as a planner
        that a schedule's template names: it returns the items of each run at fire time."""

        def register(fn: P) -> P:
            self.planners.add(name or fn.__name__, fn)
            return fn

        return register

    def add_planner(self, name: str, fn: PlannerFn) -> None:
        self.planners.add(name, fn)

    def on_schedules_changed(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` after a schedule changed in this process (the scheduler loop wakes up)."""
        self._sched().on_change.append(fn)

    async def _jobs_created(self, jobs: Sequence[Job]) -> None:
        """A run's jobs were written (with the run, not through ``enqueue_many``): wake this process's
        workers, and with a broker transport publish their messages. They have no outbox row (the tick's
        transaction writes the jobs itself), so a message lost here is published again by the relay's
        sweep of overdue jobs."""
        if not jobs:
            return
        self.notifier().notify()
        if self.settings.queue.broker:
            await self.transports.publish_jobs(jobs, "scheduled")

    def _changed(self) -> None:
        for fn in self._sched().on_change:
            fn()

    async def _plan(
        self,
        schedule_id: ScheduleId,
        spec: ScheduleSpec,
        run_id: RunId,
        trigger: RunTrigger,
        now: float,
        *,
        tick: float | None = None,
        reason: str | None = None,
        actor: str | None = None,
        parent_id: RunId | None = None,
        fired_by: str | None = None,
        dry_run: bool = False,
        trigger_data: Json = None,
    ) -> PlannedRun:
        from jobengine.scheduler.planning import new_run, plan_run

        run: Run = new_run(
            run_id, schedule_id, spec.tenant, trigger, now, tick=tick, reason=reason, actor=actor,
            parent_id=parent_id, fired_by=fired_by, trigger_data=trigger_data,
        )  # fmt: skip
        return await plan_run(self.planners, self.tasks, run, spec, dry_run=dry_run)
