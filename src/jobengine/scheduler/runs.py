"""Runs: history, a run's jobs, cancel, retry, retention; and the bookkeeping the job transitions do for
runs (:class:`~jobengine.engine.transitions.RunHooks`: ``started``, ``ended``, ``reopened``).

A run's summary moves as its jobs end, right after the store committed the job's change (best effort: the
scheduler's reconcile pass repairs what a dying process missed; docs/scheduler.md, "Delta summary"). Usage::

    runs = await engine.runs.list(RunFilter(schedule_id=s.id, states=(RunState.ERROR,)))
    jobs = await engine.runs.jobs(runs[0].id)
    retry = await engine.runs.retry(runs[0].id, actor="alice")     # the dead / cancelled segments only
    run = await engine.runs.start(RunRequest(task="score", items=ids, mode=RunMode.INCREMENTAL))

A run request (:mod:`jobengine.core.run_requests`) makes a run without a schedule: its ``schedule_id`` is
the request's stream (task and input source), so the stream's runs list as a schedule's do.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Final

from jobengine.core.bounds import check_text
from jobengine.core.clock import Clock
from jobengine.core.ids import IdKind, RunId, ScheduleId, new_run_id
from jobengine.core.models import Job, Json, NewJob, check_name
from jobengine.core.run_diff import ItemResults, RunDiff, diff_results, item_results
from jobengine.core.run_requests import RunMode, RunRequest, request_of
from jobengine.core.runs import (
    ENDED_RUN_STATES,
    JobOutcome,
    Run,
    RunFilter,
    RunState,
    RunSummary,
    RunTrigger,
    Segment,
)
from jobengine.core.schedules import check_actor
from jobengine.core.states import JobState
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.ids import resolve_id
from jobengine.ports.schedules import PlannedRun, SchedulingStore
from jobengine.ports.store import Store
from jobengine.scheduler import requests
from jobengine.scheduler.planning import new_run
from jobengine.scheduler.requests import RUNS_SEARCHED, RunPreview, RunTask, as_is
from jobengine.scheduler.schedules import JobsCreated, Published
from jobengine.tasks import TaskRegistry

log = logging.getLogger("jobengine.scheduler")

#: Cancels the graph a run fired (by the graph's id, which is the run's), so it ends ``cancelled``.
CancelGraph = Callable[[str, str | None], Awaitable[None]]

#: How many run ids a process remembers as started (so later segments of a run cost no write).
_STARTED_MEMORY: Final = 4096
ENDED_JOB_STATES: Final = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})


def job_duration(job: Job) -> float | None:
    if job.started_at is None or job.finished_at is None:
        return None
    return max(0.0, job.finished_at - job.started_at)


class Runs:
    """The runs of one engine's store. ``run_retention``: seconds an ended run is kept (0: kept for ever)."""

    def __init__(
        self,
        store: SchedulingStore,
        *,
        jobs: Store,
        clock: Clock,
        tasks: TaskRegistry,
        published: Published,
        jobs_created: JobsCreated,
        run_retention: float,
        run_task: Callable[[RunRequest], Awaitable[RunTask]] = as_is,
        cancel_graph: CancelGraph | None = None,
    ) -> None:
        """``run_task``: what a request's jobs run (the engine pins a pack's task to an approved version's
        digest, or a pending one's for a simulation)."""
        self._store = store
        self._run_task = run_task
        self._jobs = jobs
        self._clock = clock
        self._tasks = tasks
        self._published = published
        self._jobs_created = jobs_created
        self._run_retention = run_retention
        self._cancel_graph = cancel_graph
        #: Runs this process saw start, so a claim of their next segments does not write again (bounded).
        self._started: dict[RunId, None] = {}

    # -- reads --------------------------------------------------------------------------------------
    async def get(self, run_id: str, tenant: str | None = None) -> Run:
        """The run ``run_id`` names, whole or by a unique prefix (:func:`~jobengine.ports.ids.resolve_id`)."""
        runs = await self._store.get_runs([RunId(await resolve_id(self._jobs, IdKind.RUN, run_id, tenant))], tenant)
        if not runs:
            raise NotFound("run", run_id)
        return runs[0]

    async def list(self, filter: RunFilter | None = None) -> builtins.list[Run]:
        """Newest first; filter by tenant, schedule, states, trigger and creation time."""
        return await self._store.list_runs(filter or RunFilter())

    async def segments(self, run_id: str, tenant: str | None = None) -> builtins.list[Segment]:
        run = await self.get(run_id, tenant)
        return await self._store.run_segments(run.id)

    async def jobs(self, run_id: str, tenant: str | None = None) -> builtins.list[Job]:
        """The run's jobs in segment order (jobs deleted by retention are left out)."""
        segments = await self.segments(run_id, tenant)
        return await self._jobs.get_jobs([s.job_id for s in segments])

    async def preview(self, request: RunRequest, *, tenant: str = "default") -> RunPreview:
        """What :meth:`start` would do with ``request`` now: the cursor, the items the run would take, how
        many it leaves out and a sample. Writes nothing."""
        check_name("tenant", tenant)
        task = await self._run_task(request)
        found, _ = await requests.preview(self._store, self._jobs, self._tasks, request, tenant, self._clock.now(),
                                          task=task)  # fmt: skip
        return found

    async def plan(self, request: RunRequest, tenant: str, now: float, actor: str | None = None) -> PlannedRun:
        """The run :meth:`start` would write for ``request`` at ``now``, written nowhere: a schedule whose
        template is a run request writes it with its tick (``scheduler.planning.plan_request_run``)."""
        task = await self._run_task(request)
        _, planned = await requests.preview(self._store, self._jobs, self._tasks, request, tenant, now, actor, task)
        return planned

    async def diff(self, run_id: str, tenant: str | None = None) -> RunDiff:
        """Item by item, the results of a finished simulate run against those of the newest completed full
        run of the same task and input source (``core.run_diff``). NotFound for an unknown run;
        IllegalState (409) for a run that is not a simulate run or has not ended. Usage::

            diff = await engine.runs.diff(run.id)
            print(diff.counts)          # {"same": 990, "changed": 10, "new": 0, "gone": 0}
        """
        run = await self.get(run_id, tenant)
        if request_of(run.trigger_data).get("mode") != RunMode.SIMULATE.value:
            raise IllegalState(f"run {run_id} is not a simulate run; only a simulate run has a diff")
        if not run.ended:
            raise IllegalState(f"run {run_id} is {run.state.value}; its diff is ready once it ended")
        after, unfinished = await self._item_results(run)
        base = await self._base(run)
        before = {} if base is None else (await self._item_results(base))[0]
        return RunDiff(run.id, None if base is None else base.id, diff_results(before, after), unfinished)

    async def _base(self, run: Run) -> Run | None:
        """The run ``run`` was started against (``base_run_id`` in its trigger data, as a pack version's
        simulation names the run whose inputs it took), else the newest completed full run of its stream."""
        data = run.trigger_data if isinstance(run.trigger_data, dict) else {}
        named = data.get("base_run_id")
        if isinstance(named, str):
            found = await self._store.get_runs([RunId(named)], run.tenant)
            if found:
                return found[0]
        return await self._last_full(run)

    async def last_full(self, stream: str, tenant: str = "default") -> Run | None:
        """The newest completed full run of ``stream`` (a request's :attr:`~RunRequest.stream`), or None."""
        found = await self._store.list_runs(RunFilter(
            tenant=tenant, schedule_id=ScheduleId(stream), states=(RunState.COMPLETED,), limit=RUNS_SEARCHED,
        ))  # fmt: skip
        full = {r.id: r for r in await self._store.get_runs([r.id for r in found])}
        for candidate in (full[r.id] for r in found if r.id in full):
            if request_of(candidate.trigger_data).get("mode") == RunMode.FULL.value:
                return candidate
        return None

    async def items(self, run_id: str, tenant: str | None = None) -> builtins.list[Json]:
        """The items of a run's segments, in segment order. IllegalState when retention deleted some jobs."""
        run = await self.get(run_id, tenant)
        segments = sorted(await self._store.run_segments(run.id), key=lambda s: s.index)
        jobs = {j.id: j for j in await self._jobs.get_jobs([s.job_id for s in segments])}
        if len(jobs) < len(segments):
            raise IllegalState(f"run {run_id}: retention deleted some of its jobs; its items are unknown")
        return [i for s in segments for i in _items(jobs[s.job_id])]

    async def _last_full(self, run: Run) -> Run | None:
        """The newest completed full run of ``run``'s stream made no later than it."""
        found = await self._store.list_runs(RunFilter(
            tenant=run.tenant, schedule_id=run.schedule_id, states=(RunState.COMPLETED,), limit=RUNS_SEARCHED,
        ))  # fmt: skip
        ids = [r.id for r in found if r.id != run.id and r.created_at <= run.created_at]
        full = {r.id: r for r in await self._store.get_runs(ids)}
        for candidate in (full[i] for i in ids if i in full):
            if request_of(candidate.trigger_data).get("mode") == RunMode.FULL.value:
                return candidate
        return None

    async def _item_results(self, run: Run) -> tuple[ItemResults, int]:
        """Each item's result in ``run``'s succeeded segments, and how many items its other segments had. A
        retry run holds only the segments it did again: the results of the run it retried come first."""
        segments = await self._store.run_segments(run.id)
        done = [s for s in segments if s.outcome is JobState.SUCCEEDED]
        jobs = await self._jobs.get_jobs([s.job_id for s in done])
        results = item_results(jobs)
        if run.trigger is RunTrigger.RETRY and run.parent_id is not None:
            parent = await self._store.get_runs([RunId(run.parent_id)], run.tenant)
            if parent:
                results = {**(await self._item_results(parent[0]))[0], **results}
        return results, sum(s.items for s in segments if s.outcome is not JobState.SUCCEEDED)

    # -- actions ------------------------------------------------------------------------------------
    async def replay(
        self, run_id: str, *, reason: str | None = None, tenant: str | None = None, actor: str = "system"
    ) -> Run:
        """A new run of an ended run request's run (``parent_id`` the old one) over the same items, with the
        same task, version, mode and environment. It is ``queued`` until a worker claims its first job and
        moves no cursor (as a retry does). IllegalState (409) for a run that has not ended, that no run
        request made, or whose jobs retention already deleted. Usage::

            again = await engine.runs.replay(run.id, reason="the scores looked wrong")
        """
        check_actor(actor)
        if reason is not None:
            check_text("reason", reason)
        run = await self.get(run_id, tenant)
        if not run.ended:
            raise IllegalState(f"run {run_id} is {run.state.value}; only an ended run can be replayed")
        stored = request_of(run.trigger_data)
        if not stored:
            raise IllegalState(f"run {run_id} was not made by a run request; trigger its schedule instead")
        segments = sorted(await self._store.run_segments(run.id), key=lambda s: s.index)
        jobs = {j.id: j for j in await self._jobs.get_jobs([s.job_id for s in segments])}
        if len(jobs) < len(segments):
            raise IllegalState(f"run {run_id}: retention deleted some of its jobs; its items are unknown")
        items = [i for s in segments for i in _items(jobs[s.job_id])]
        reason = reason or f"replay of run {run.id}"
        request = RunRequest(**{**stored, "items": tuple(items), "run_id": None, "reason": reason})
        now = self._clock.now()
        new = new_run(new_run_id(), run.schedule_id, run.tenant, RunTrigger.REQUEST, now, reason=reason, actor=actor,
                      parent_id=run.id)  # fmt: skip
        first = jobs[segments[0].job_id] if segments else None
        # The same code again: a pack's task keeps the digest the run's jobs ran, whatever its channel says now.
        task = RunTask(first.task, first.queue) if first is not None else RunTask(request.task)
        planned = requests.fan_out_request(self._tasks, request, new, request.items, task)
        data: dict[str, Json] = {"request": {**stored, "reason": reason}, "replay_of": run.id}
        old = run.trigger_data if isinstance(run.trigger_data, dict) else {}
        if isinstance(old.get("pack"), dict):
            data["pack"] = old["pack"]
        planned = replace(planned, run=replace(planned.run, trigger_data=data, mode=request.mode.value))
        fired = await self._store.insert_run(planned, now)
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        return fired.runs[0]

    async def start(
        self, request: RunRequest, *, tenant: str = "default", actor: str = "system", base_run_id: str | None = None
    ) -> Run:
        """A run of ``request.task`` over the request's items (``core.run_requests``: full, incremental or
        simulate), one job per segment at the priority of its class. With ``request.run_id``, the same
        request again returns the run it made; a different request with that id raises IllegalState. An
        incremental run raises IllegalState (409) while another incremental run of its stream (task and
        source) is unfinished: both would take the items after the same cursor (docs/scheduler.md).
        ``base_run_id`` (a simulate run only): the run its diff is against, instead of the newest full run.

        Usage::

            run = await engine.runs.start(RunRequest(task="score", items=ids, mode=RunMode.INCREMENTAL))
        """
        check_actor(actor)
        check_name("tenant", tenant)
        if request.run_id is not None:
            existing = await self._store.get_runs([RunId(request.run_id)])
            if existing:
                return requests.same_request(existing[0], request, tenant)
        now = self._clock.now()
        task = await self._run_task(request)
        _, planned = await requests.preview(self._store, self._jobs, self._tasks, request, tenant, now, actor, task)
        if base_run_id is not None:
            if request.mode is not RunMode.SIMULATE:
                raise IllegalState("base_run_id: only a simulate run is compared with another run")
            data = planned.run.trigger_data if isinstance(planned.run.trigger_data, dict) else {}
            planned = replace(planned, run=replace(planned.run, trigger_data={**data, "base_run_id": base_run_id}))
        try:
            fired = await self._store.insert_run(planned, now)
        except AlreadyExists:  # the same run id, written meanwhile by a concurrent request
            return requests.same_request(await self.get(planned.run.id), request, tenant)
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        return fired.runs[0]

    async def cancel(
        self, run_id: str, *, reason: str = "cancelled by user", tenant: str | None = None, actor: str = "system"
    ) -> Run:
        """Cancel an unfinished run: it becomes cancelled at once, its jobs that have not run are
        cancelled, running ones are asked to stop. Raises IllegalState for a run that already ended."""
        check_actor(actor)
        check_text("reason", reason)
        run = await self.get(run_id, tenant)
        if run.ended:
            raise IllegalState(f"run {run.id} is already {run.state.value}; nothing to cancel")
        now = self._clock.now()
        # The run first: cancelling its jobs first could end it as "every job cancelled" without the
        # audit record of who cancelled it.
        run, events = await self._store.cancel_run(run.id, tenant, reason, actor, now)
        self._published(events)
        segments = await self._store.run_segments(run.id)
        open_ids = [s.job_id for s in segments if s.outcome is None]
        fired_graph = open_ids and any(j.graph_id is not None for j in await self._jobs.get_jobs(open_ids[:1]))
        if fired_graph and self._cancel_graph is not None:
            await self._cancel_graph(run.id, tenant)  # its graph's id is the run's
            return await self.get(run.id, tenant)
        if open_ids:
            changed = await self._jobs.cancel_jobs(open_ids, reason, now, tenant)
            self._published(changed.events)
            # A job that ended before the cancel while its outcome never reached the run (its process died
            # between the two writes) is counted here: reconcile passes over a run once it has ended.
            cancelled = {j.id for j in changed.jobs}
            earlier = await self._jobs.get_jobs([i for i in open_ids if i not in cancelled])
            await self.ended([*changed.jobs, *earlier])
        return await self.get(run.id, tenant)

    async def retry(
        self, run_id: str, *, reason: str | None = None, tenant: str | None = None, actor: str = "system"
    ) -> Run:
        """A new run (trigger ``retry``, ``parent_id`` the old one) with a copy of each segment of an ended
        run that ended dead or cancelled. Raises IllegalState if the run has not ended or nothing failed, or
        if it fired a graph (the graph, whose id is the run's, retries its failed nodes in place)."""
        check_actor(actor)
        if reason is not None:
            check_text("reason", reason)
        run = await self.get(run_id, tenant)
        if run.state not in ENDED_RUN_STATES:
            raise IllegalState(f"run {run.id} is {run.state.value}; only an ended run can be retried")
        segments = await self._store.run_segments(run.id)
        failed = [s for s in segments if s.outcome in (JobState.DEAD, JobState.CANCELLED)]
        jobs = {j.id: j for j in await self._jobs.get_jobs([s.job_id for s in failed])}
        failed = [s for s in failed if s.job_id in jobs]
        if any(j.graph_id is not None for j in jobs.values()):
            # Copies of a graph's nodes would run without their edges: the graph retries itself in place.
            raise IllegalState(f"run {run.id} fired a graph; retry the graph instead (engine.graphs.retry)")
        if not failed:
            raise IllegalState(f"run {run.id} has no dead or cancelled jobs to retry")
        now = self._clock.now()
        new_id = new_run_id()
        copies = tuple(_copy(jobs[s.job_id], new_id) for s in failed)
        retry = new_run(
            new_id, run.schedule_id, run.tenant, RunTrigger.RETRY, now, reason=reason or f"retry of run {run.id}",
            actor=actor, parent_id=run.id,
        )  # fmt: skip
        items = tuple(s.items for s in failed)
        # A run request's retry keeps its mode and request (a simulate run's retry is a simulation too,
        # with the same base for its diff); it moves no cursor and never takes its stream.
        old = run.trigger_data if isinstance(run.trigger_data, dict) else {}
        kept = {k: v for k, v in old.items() if k in _KEPT_ON_RETRY}
        data: Json = {**kept, "retry_of": run.id} if request_of(old) else None
        retry = replace(retry, summary=RunSummary(total=len(copies)), items=sum(items), mode=run.mode,
                        trigger_data=data)  # fmt: skip
        planned = PlannedRun(retry, copies, tuple(self._tasks.phase_names(j.task) for j in copies), items)
        fired = await self._store.insert_run(planned, now)
        self._published(fired.events)
        await self._jobs_created(fired.jobs)
        return fired.runs[0]

    async def prune(self, limit: int = 10_000) -> int:
        """Delete runs that ended more than ``run_retention`` seconds ago (and their segment rows), and tick
        records as old (0: keep them all). Their jobs are untouched (job retention has its own settings).
        Returns how many rows went."""
        keep = self._run_retention
        if keep <= 0:
            return 0
        return await self._store.prune_runs(self._clock.now() - keep, limit)

    # -- the hooks of the job transitions -----------------------------------------------------------
    async def started(self, jobs: Sequence[Job]) -> None:
        """Jobs were claimed: their queued runs are running. Best effort (reconcile catches up)."""
        ids = [j.run_id for j in jobs if j.run_id is not None and j.run_id not in self._started]
        if not ids:
            return
        try:
            self._published(await self._store.start_runs(ids, self._clock.now()))
        except Exception as exc:
            log.warning("runs %s: could not mark started (%s); the scheduler will", ids, exc)
            return
        for run_id in ids:
            self._started[run_id] = None
        while len(self._started) > _STARTED_MEMORY:
            del self._started[next(iter(self._started))]

    async def ended(self, jobs: Sequence[Job]) -> None:
        """Jobs changed: those of a run that ended count in its summary. Best effort (reconcile catches up)."""
        ended = [(j, j.run_id) for j in jobs if j.run_id is not None and j.state in ENDED_JOB_STATES]
        if ended:
            await self._record([JobOutcome(j.id, run, j.state, job_duration(j)) for j, run in ended])

    async def reopened(self, jobs: Sequence[Job]) -> None:
        """Jobs were queued again by hand: their outcome no longer counts, and an ended run reopens."""
        reopened = [(j.id, j.run_id) for j in jobs if j.run_id is not None]
        if reopened:
            await self._record([JobOutcome(job, run, None) for job, run in reopened])

    # -- internals ----------------------------------------------------------------------------------
    async def _record(self, outcomes: Sequence[JobOutcome]) -> None:
        if not outcomes:
            return
        try:
            self._published(await self._store.record_outcomes(outcomes, self._clock.now()))
        except Exception as exc:
            log.warning("run summaries: could not record %d outcome(s) (%s); the scheduler will", len(outcomes), exc)


#: What a retry run's trigger data keeps of the run it retries: the request, the run its diff is against,
#: the pack version it runs.
_KEPT_ON_RETRY: Final = frozenset({"request", "base_run_id", "pack"})


def _items(job: Job) -> list[Json]:
    items = job.payload.get("items") if isinstance(job.payload, dict) else None
    return items if isinstance(items, list) else []


def _copy(job: Job, run_id: RunId) -> NewJob:
    """A failed segment's job again, for a retry run: same task, payload and options, a new id."""
    return NewJob(
        task=job.task, payload=job.payload, queue=job.queue, priority=job.priority, max_attempts=job.max_attempts,
        tenant=job.tenant, timeout=job.timeout, run_id=run_id, schedule_id=job.schedule_id,
    )  # fmt: skip
