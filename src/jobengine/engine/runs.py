"""Runs on the Engine facade: history, a run's jobs, cancel, retry; the scheduler's passes (fire what is
due, plan runs whose turn came, reconcile); and the bookkeeping the job paths do for runs.

A run's summary moves as its jobs end, in the engine's job paths (``complete_jobs``, ``fail_jobs``,
``cancel``, ``retry``, the rescuer), right after the store committed the job's change: one more small
transaction, only for batches that hold jobs of a run. If the process dies in between, the scheduler's
reconcile pass (every ``scheduler_reconcile_interval``) finds the job ended and applies the outcome; the
summary is a delta per segment, so applying an outcome twice counts it once. Usage::

    runs = await engine.list_runs(RunFilter(schedule_id=s.id, states=(RunState.ERROR,)))
    jobs = await engine.run_jobs(runs[0].id)
    retry = await engine.retry_run(runs[0].id, actor="alice")     # the dead / cancelled segments only
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from jobengine.core.bounds import check_text
from jobengine.core.ids import RunId, new_run_id
from jobengine.core.models import Job, NewJob
from jobengine.core.states import JobState
from jobengine.engine.scheduling import SchedulingBase
from jobengine.errors import IllegalState, NotFound, StoreError

if TYPE_CHECKING:
    from jobengine.core.runs import (
        JobOutcome,
        Run,
        RunFilter,
        Segment,
    )
    from jobengine.core.schedules import Schedule

log = logging.getLogger("jobengine.scheduler")

#: How many run ids a process remembers as started (so later segments of a run cost no write).
_STARTED_MEMORY: Final = 4096
_ENDED: Final = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})


def _duration(job: Job) -> float | None:
    if job.started_at is None or job.finished_at is None:
        return None
    return max(0.0, job.finished_at - job.started_at)


class RunFacade(SchedulingBase):
    # -- retention ----------------------------------------------------------------------------------
    async def prune_runs(self, limit: int = 10_000) -> int:
        """Delete runs that ended more than ``settings.run_retention`` seconds ago (and their segment rows),
        and tick records as old (0: keep them all). Their jobs are untouched (job retention has its own
        settings). Returns how many rows went; 0 for a store without schedules."""
        keep = self.settings.run_retention
        store = self._scheduling_or_none()
        if keep <= 0 or store is None:
            return 0
        return await store.prune_runs(self.clock.now() - keep, limit)

    # -- reads --------------------------------------------------------------------------------------
    async def get_run(self, run_id: str, tenant: str | None = None) -> Run:
        runs = await self._scheduling().get_runs([RunId(run_id)], tenant)
        if not runs:
            raise NotFound("run", run_id)
        return runs[0]

    async def list_runs(self, filter: RunFilter | None = None) -> list[Run]:
        """Newest first; filter by tenant, schedule, states, trigger and creation time."""
        from jobengine.core.runs import RunFilter

        return await self._scheduling().list_runs(filter or RunFilter())

    async def run_segments(self, run_id: str, tenant: str | None = None) -> list[Segment]:
        run = await self.get_run(run_id, tenant)
        return await self._scheduling().run_segments(run.id)

    async def run_jobs(self, run_id: str, tenant: str | None = None) -> list[Job]:
        """The run's jobs in segment order (jobs deleted by retention are left out)."""
        segments = await self.run_segments(run_id, tenant)
        return await self.store.get_jobs([s.job_id for s in segments])

    # -- actions ------------------------------------------------------------------------------------
    async def cancel_run(
        self, run_id: str, *, reason: str = "cancelled by user", tenant: str | None = None, actor: str = "system"
    ) -> Run:
        """Cancel an unfinished run: it becomes cancelled at once, its jobs that have not run are
        cancelled, running ones are asked to stop. Raises IllegalState for a run that already ended."""
        from jobengine.core.schedules import check_actor

        check_actor(actor)
        check_text("reason", reason)
        run = await self.get_run(run_id, tenant)
        if run.ended:
            raise IllegalState(f"run {run_id} is already {run.state.value}; nothing to cancel")
        now = self.clock.now()
        # The run first: cancelling its jobs first could end it as "every job cancelled" without the
        # audit record of who cancelled it.
        run, events = await self._scheduling().cancel_run(run.id, tenant, reason, actor, now)
        self._published(events)
        segments = await self._scheduling().run_segments(run.id)
        open_ids = [s.job_id for s in segments if s.outcome is None]
        if open_ids:
            changed = await self.store.cancel_jobs(open_ids, reason, now, tenant)
            self._published(changed.events)
            await self._runs_ended(changed.jobs)
        return await self.get_run(run_id, tenant)

    async def retry_run(
        self, run_id: str, *, reason: str | None = None, tenant: str | None = None, actor: str = "system"
    ) -> Run:
        """A new run (trigger ``retry``, ``parent_id`` the old one) with a copy of each segment of an ended
        run that ended dead or cancelled. Raises IllegalState if the run has not ended or nothing failed."""
        from jobengine.core.runs import ENDED_RUN_STATES, RunSummary, RunTrigger
        from jobengine.core.schedules import check_actor
        from jobengine.ports.schedules import PlannedRun
        from jobengine.scheduler.planning import new_run

        check_actor(actor)
        if reason is not None:
            check_text("reason", reason)
        run = await self.get_run(run_id, tenant)
        if run.state not in ENDED_RUN_STATES:
            raise IllegalState(f"run {run_id} is {run.state.value}; only an ended run can be retried")
        segments = await self._scheduling().run_segments(run.id)
        failed = [s for s in segments if s.outcome in (JobState.DEAD, JobState.CANCELLED)]
        jobs = {j.id: j for j in await self.store.get_jobs([s.job_id for s in failed])}
        failed = [s for s in failed if s.job_id in jobs]
        if not failed:
            raise IllegalState(f"run {run_id} has no dead or cancelled jobs to retry")
        now = self.clock.now()
        new_id = new_run_id()
        copies = tuple(_copy(jobs[s.job_id], new_id) for s in failed)
        retry = new_run(
            new_id, run.schedule_id, run.tenant, RunTrigger.RETRY, now, reason=reason or f"retry of run {run.id}",
            actor=actor, parent_id=run.id,
        )  # fmt: skip
        items = tuple(s.items for s in failed)
        retry = replace(retry, summary=RunSummary(total=len(copies)), items=sum(items))
        planned = PlannedRun(retry, copies, tuple(self._phase_of(j.task) for j in copies), items)
        fired = await self._scheduling().insert_run(planned, now)
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        return fired.runs[0]

    def _phase_of(self, task: str) -> tuple[str, ...]:
        spec = self.tasks.get(task)
        return spec.phase_names if spec else ()

    # -- the scheduler's passes ---------------------------------------------------------------------
    async def next_schedule_fire_at(self) -> float | None:
        return await self._scheduling().next_fire_at()

    async def fire_due_schedules(self, *, fired_by: str | None = None, limit: int = 100) -> list[Run]:
        """One pass: every due schedule's ticks (``core.firing.plan_ticks``) fire, each exactly once. Safe
        to call from any number of processes at once. Returns the runs this call created."""
        now = self.clock.now()
        out: list[Run] = []
        for schedule in await self._scheduling().due_schedules(now, limit):
            try:
                out.extend(await self._fire(schedule, now, fired_by))
            except StoreError:
                raise
            except Exception:  # one broken schedule must not stop the others
                log.exception("schedule %s (%s): firing failed", schedule.name, schedule.id)
        return out

    async def _fire(self, schedule: Schedule, now: float, fired_by: str | None) -> list[Run]:
        from jobengine.core import firing
        from jobengine.core.runs import RunTrigger
        from jobengine.core.schedules import SCHEDULE_MISFIRED
        from jobengine.ports.schedules import TickClaim

        spec = schedule.spec
        plan = firing.plan_ticks(
            spec.cadence(), schedule.cursor, now, self.settings.scheduler_misfire_grace, spec.misfire, spec.catch_up
        )
        runs = []
        for tick in plan.fire:
            runs.append(
                await self._plan(
                    schedule.id, spec, new_run_id(), RunTrigger.SCHEDULE, now, tick=tick, fired_by=fired_by
                )
            )
        events = (
            (firing.misfired_event(schedule.tenant, schedule.id, plan, spec.misfire),)
            if plan.dropped or plan.dropped_more
            else ()
        )
        claim = TickClaim(
            schedule_id=schedule.id, version=schedule.version, cursor=schedule.cursor, new_cursor=plan.cursor,
            next_fire_at=plan.next_fire_at, overlap=spec.overlap, runs=tuple(runs), events=events,
            fired_by=fired_by,
        )  # fmt: skip
        fired = await self._scheduling().fire_ticks(claim, now)
        if fired is None:
            return []  # another scheduler fired these ticks, or the schedule changed meanwhile
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        if any(e.type == SCHEDULE_MISFIRED for e in fired.events):
            log.warning("schedule %s: %d missed tick(s) dropped (misfire %s)", spec.name, plan.dropped, spec.misfire)
        return fired.runs

    async def plan_waiting_runs(self, limit: int = 100) -> list[Run]:
        """Plan the runs that waited for the previous one (overlap ``queue``) and whose turn came."""
        store = self._scheduling()
        out: list[Run] = []
        for run in await store.waiting_runs(limit):
            now = self.clock.now()
            found = await store.get_schedules([run.schedule_id])
            if not found:
                await self.cancel_run(run.id, reason="its schedule was deleted", actor="scheduler")
                continue
            planned = await self._plan(
                run.schedule_id, found[0].spec, run.id, run.trigger, now, tick=run.tick,
                reason=run.reason, actor=run.actor, parent_id=run.parent_id, fired_by=run.fired_by,
            )  # fmt: skip
            planned = replace(planned, run=replace(planned.run, created_at=run.created_at))
            fired = await store.plan_waiting_run(planned, now)
            if fired is not None:
                self._published(fired.events)
                await self._jobs_created(fired.jobs)
                out.extend(fired.runs)
        return out

    async def reconcile_runs(self, limit: int = 500) -> int:
        """Bring queued and running runs in line with their jobs (outcomes a crashed process did not
        record, starts it did not mark). Returns how many corrections were made."""
        store = self._scheduling()
        fixes = 0
        after: RunId | None = None
        while True:
            runs = await store.active_runs(limit, after)
            for run in runs:
                fixes += await self._reconcile(run)
            if len(runs) < limit:
                return fixes
            after = runs[-1].id

    async def _reconcile(self, run: Run) -> int:
        from jobengine.core.runs import JobOutcome, RunState

        store = self._scheduling()
        segments = await store.run_segments(run.id)
        jobs = {j.id: j for j in await self.store.get_jobs([s.job_id for s in segments])}
        outcomes = []
        started = False
        for s in segments:
            job = jobs.get(s.job_id)
            if job is None:
                continue  # deleted by retention: nothing left to learn
            started = started or job.started_at is not None
            final = job.final_state if job.final_state in _ENDED else None
            if final != s.outcome:
                outcomes.append(JobOutcome(job.id, run.id, final, _duration(job)))
        now = self.clock.now()
        events = []
        if started and run.state is RunState.QUEUED:
            events += await store.start_runs([run.id], now)
        if outcomes:
            events += await store.record_outcomes(outcomes, now)
        self._published(events)
        return len(outcomes) + (1 if started and run.state is RunState.QUEUED else 0)

    # -- bookkeeping of the job paths (called by the Engine) ----------------------------------------
    async def _runs_started(self, jobs: Sequence[Job]) -> None:
        """Jobs were claimed: their queued runs are running. Best effort (reconcile catches up)."""
        state = self._sched()
        ids = [j.run_id for j in jobs if j.run_id is not None and j.run_id not in state.started]
        if not ids:
            return
        store = self._scheduling_or_none()
        if store is None:
            return
        try:
            self._published(await store.start_runs(ids, self.clock.now()))
        except Exception as exc:
            log.warning("runs %s: could not mark started (%s); the scheduler will", ids, exc)
            return
        for run_id in ids:
            state.started[run_id] = None
        while len(state.started) > _STARTED_MEMORY:
            del state.started[next(iter(state.started))]

    async def _runs_ended(self, jobs: Sequence[Job]) -> None:
        """Jobs changed: those of a run that ended count in its summary. Best effort (reconcile catches up)."""
        ended = [(j, j.run_id) for j in jobs if j.run_id is not None and j.state in _ENDED]
        if ended:  # checked first: a worker whose jobs belong to no run never imports the scheduler's modules
            from jobengine.core.runs import JobOutcome

            await self._record([JobOutcome(j.id, run, j.state, _duration(j)) for j, run in ended])

    async def _runs_reopened(self, jobs: Sequence[Job]) -> None:
        """Jobs were queued again by hand: their outcome no longer counts, and an ended run reopens."""
        reopened = [(j.id, j.run_id) for j in jobs if j.run_id is not None]
        if reopened:
            from jobengine.core.runs import JobOutcome

            await self._record([JobOutcome(job, run, None) for job, run in reopened])

    async def _record(self, outcomes: Sequence[JobOutcome]) -> None:
        if not outcomes:
            return
        store = self._scheduling_or_none()
        if store is None:
            return
        try:
            self._published(await store.record_outcomes(outcomes, self.clock.now()))
        except Exception as exc:
            log.warning("run summaries: could not record %d outcome(s) (%s); the scheduler will", len(outcomes), exc)


def _copy(job: Job, run_id: RunId) -> NewJob:
    """A failed segment's job again, for a retry run: same task, payload and options, a new id."""
    return NewJob(
        task=job.task, payload=job.payload, queue=job.queue, priority=job.priority, max_attempts=job.max_attempts,
        tenant=job.tenant, timeout=job.timeout, run_id=run_id, schedule_id=job.schedule_id,
    )  # fmt: skip
