"""The scheduler's passes: fire what is due, plan runs whose turn came, reconcile runs with their jobs.

:class:`SchedulerPasses` is the :class:`~jobengine.scheduler.loop.SchedulerSource` the leader-gated loop
drives; tests call the passes themselves with a manual clock. Every pass is safe to run in any number of
processes at once: exactly once comes from the store (the unique tick key and the cursor compare-and-set,
see ``ports/schedules.py``). Usage::

    passes = engine.scheduler
    loop = SchedulerLoop(passes, passes.leader("scheduler"))
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from jobengine.core import firing
from jobengine.core.clock import Clock
from jobengine.core.ids import RunId, new_run_id
from jobengine.core.request_template import RequestTemplate
from jobengine.core.runs import JobOutcome, Run, RunState, RunTrigger
from jobengine.core.schedules import SCHEDULE_MISFIRED, Schedule
from jobengine.errors import StoreError
from jobengine.ports.leader import Leader
from jobengine.ports.schedules import SchedulingStore, TickClaim
from jobengine.ports.store import Store
from jobengine.scheduler.planning import PlannerRegistry, new_run, plan_run
from jobengine.scheduler.runs import ENDED_JOB_STATES, Runs, job_duration
from jobengine.scheduler.schedules import JobsCreated, Published
from jobengine.tasks import TaskRegistry

log = logging.getLogger("jobengine.scheduler")


class SchedulerPasses:
    """The passes over one engine's store. ``planners`` is the registry of ``engine.schedules``; ``runs``
    cancels a waiting run whose schedule was deleted; ``leaders`` hands out the store's :class:`Leader`;
    ``misfire_grace``: seconds a tick may be late and still fire."""

    def __init__(
        self,
        store: SchedulingStore,
        *,
        jobs: Store,
        clock: Clock,
        tasks: TaskRegistry,
        planners: PlannerRegistry,
        runs: Runs,
        published: Published,
        jobs_created: JobsCreated,
        leaders: Callable[[str], Leader],
        misfire_grace: float,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self.clock = clock
        self._tasks = tasks
        self._planners = planners
        self._runs = runs
        self._published = published
        self._jobs_created = jobs_created
        self._leaders = leaders
        self._misfire_grace = misfire_grace

    def leader(self, name: str) -> Leader:
        """A :class:`Leader` for ``name`` among every process of this store (a lease row on SQLite, an
        advisory lock on PostgreSQL)."""
        return self._leaders(name)

    async def next_schedule_fire_at(self) -> float | None:
        return await self._store.next_fire_at()

    async def fire_due_schedules(self, *, fired_by: str | None = None, limit: int = 100) -> list[Run]:
        """One pass: every due schedule's ticks (``core.firing.plan_ticks``) fire, each exactly once. Safe
        to call from any number of processes at once. Returns the runs this call created."""
        now = self.clock.now()
        out: list[Run] = []
        for schedule in await self._store.due_schedules(now, limit):
            try:
                out.extend(await self._fire(schedule, now, fired_by))
            except StoreError:
                raise
            except Exception:  # one broken schedule must not stop the others
                log.exception("schedule %s (%s): firing failed", schedule.name, schedule.id)
        return out

    async def plan_waiting_runs(self, limit: int = 100) -> list[Run]:
        """Plan the runs that waited for the previous one (overlap ``queue``) and whose turn came."""
        out: list[Run] = []
        for run in await self._store.waiting_runs(limit):
            now = self.clock.now()
            found = await self._store.get_schedules([run.schedule_id])
            if not found:
                await self._runs.cancel(run.id, reason="its schedule was deleted", actor="scheduler")
                continue
            spec = found[0].spec
            again = new_run(
                run.id, run.schedule_id, spec.tenant, run.trigger, now, tick=run.tick, reason=run.reason,
                actor=run.actor, parent_id=run.parent_id, fired_by=run.fired_by,
            )  # fmt: skip
            planned = await plan_run(self._planners, self._tasks, again, spec, plan_request=self._runs.plan)
            planned = replace(planned, run=replace(planned.run, created_at=run.created_at))
            fired = await self._store.plan_waiting_run(planned, now)
            if fired is not None:
                self._published(fired.events)
                await self._jobs_created(fired.jobs)
                out.extend(fired.runs)
        return out

    async def reconcile_runs(self, limit: int = 500) -> int:
        """Bring queued and running runs in line with their jobs (outcomes a crashed process did not
        record, starts it did not mark). Returns how many corrections were made."""
        fixes = 0
        after: RunId | None = None
        while True:
            runs = await self._store.active_runs(limit, after)
            for run in runs:
                fixes += await self._reconcile(run)
            if len(runs) < limit:
                return fixes
            after = runs[-1].id

    async def _fire(self, schedule: Schedule, now: float, fired_by: str | None) -> list[Run]:
        spec = schedule.spec
        grace = self._misfire_grace
        ticks = firing.plan_ticks(spec.cadence(), schedule.cursor, now, grace, spec.misfire, spec.catch_up)
        runs = []
        for tick in ticks.fire:
            # A run request's run id is derived from the tick, so a tick fired twice is one run whatever wrote it.
            run_id = (
                firing.tick_run_id(schedule.id, tick) if isinstance(spec.template, RequestTemplate) else new_run_id()
            )
            run = new_run(run_id, schedule.id, spec.tenant, RunTrigger.SCHEDULE, now, tick=tick, fired_by=fired_by)
            planned = await plan_run(self._planners, self._tasks, run, spec, plan_request=self._runs.plan)
            runs.append(planned)
        events = (
            (firing.misfired_event(schedule.tenant, schedule.id, ticks, spec.misfire),)
            if ticks.dropped or ticks.dropped_more
            else ()
        )
        claim = TickClaim(
            schedule_id=schedule.id, version=schedule.version, cursor=schedule.cursor, new_cursor=ticks.cursor,
            next_fire_at=ticks.next_fire_at, overlap=spec.overlap, runs=tuple(runs), events=events,
            fired_by=fired_by,
        )  # fmt: skip
        fired = await self._store.fire_ticks(claim, now)
        if fired is None:
            return []  # another scheduler fired these ticks, or the schedule changed meanwhile
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        if any(e.type == SCHEDULE_MISFIRED for e in fired.events):
            log.warning("schedule %s: %d missed tick(s) dropped (misfire %s)", spec.name, ticks.dropped, spec.misfire)
        return fired.runs

    async def _reconcile(self, run: Run) -> int:
        segments = await self._store.run_segments(run.id)
        jobs = {j.id: j for j in await self._jobs.get_jobs([s.job_id for s in segments])}
        outcomes = []
        started = False
        for s in segments:
            job = jobs.get(s.job_id)
            if job is None:
                continue  # deleted by retention: nothing left to learn
            started = started or job.started_at is not None
            final = job.final_state if job.final_state in ENDED_JOB_STATES else None
            if final != s.outcome:
                outcomes.append(JobOutcome(job.id, run.id, final, job_duration(job)))
        now = self.clock.now()
        events = []
        if started and run.state is RunState.QUEUED:
            events += await self._store.start_runs([run.id], now)
        if outcomes:
            events += await self._store.record_outcomes(outcomes, now)
        self._published(events)
        return len(outcomes) + (1 if started and run.state is RunState.QUEUED else 0)
