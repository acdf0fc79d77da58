"""The reference of the parity test: the job transitions of a Store, in memory, applying the pure functions
of ``core/transitions.py`` directly (``test_parity.py`` holds SQLite and PostgreSQL to it, step by step).

Not a backend: only the transitions and the reads the parity test compares (no notifier, workers,
scheduling, API records or outbox). A batch that raises leaves nothing behind (changes are staged, then
committed). Cancel cascades walk a stack, a job's dependents by id: that order is the one every backend's
events follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace

from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core import transitions as tr
from jobengine.core.ids import JobId, WorkerId, new_lease_token
from jobengine.core.models import (
    Changed,
    Completion,
    Event,
    FailOutcome,
    Failure,
    Heartbeat,
    Inserted,
    Job,
    JobFilter,
    Lease,
    NewEvent,
    NewJob,
    PhaseUpdate,
    Pruned,
    filter_matches,
    overall_progress,
)
from jobengine.core.states import BREAKS_DEPENDENTS, RUNNABLE, TERMINAL, UNFINISHED, JobState
from jobengine.errors import IdempotencyConflict, InvalidJob, UnknownDependency


def _succeeded(job: Job) -> bool:
    return job.final_state is JobState.SUCCEEDED


class Oracle:
    """The reference store of the parity test (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[JobId, Job] = {}
        self._dependents: dict[JobId, set[JobId]] = {}
        self._idem: dict[tuple[str, str], JobId] = {}
        self._events: list[Event] = []
        self._next_event = 1
        self._lock = asyncio.Lock()

    # -- helpers ------------------------------------------------------------------------------------
    def _append(self, events: Iterable[NewEvent], now: float) -> list[Event]:
        out = []
        for e in events:
            out.append(Event(self._next_event, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data))
            self._next_event += 1
        self._events.extend(out)
        return out

    def _held(self, job_id: JobId, token: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.lease_token != token:
            return None
        return job

    def _cascade_cancel(self, root: Job, now: float, jobs: list[Job], events: list[NewEvent]) -> None:
        stack = [root]
        while stack:
            parent = stack.pop()
            for dep_id in sorted(self._dependents.get(parent.id, ())):
                child = self._jobs.get(dep_id)
                if child is None or child.state is not JobState.BLOCKED:
                    continue
                child, e = tr.cancel(child, f"dependency {parent.id} ended {parent.state.value}", now)
                self._jobs[child.id] = child
                jobs.append(child)
                events.append(e)
                stack.append(child)

    def _unblock_dependents(self, parent: Job, now: float, jobs: list[Job], events: list[NewEvent]) -> None:
        for dep_id in sorted(self._dependents.get(parent.id, ())):
            child = self._jobs.get(dep_id)
            if child is None or child.state is not JobState.BLOCKED:
                continue
            # A dependency that is gone was deleted by retention, which only deletes terminal jobs, and a
            # dead or cancelled one would have cancelled this child already: so it succeeded.
            if all(d not in self._jobs or _succeeded(self._jobs[d]) for d in child.depends_on):
                child, e = tr.unblock(child, now)
                self._jobs[child.id] = child
                jobs.append(child)
                events.append(e)

    # -- transitions --------------------------------------------------------------------------------
    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        async with self._lock:
            return self._insert(jobs, now, phases)

    def _insert(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        staged: dict[JobId, Job] = {}
        idem: dict[tuple[str, str], JobId] = {}
        out: list[Job] = []
        created: list[bool] = []
        new_events: list[NewEvent] = []
        cancelled_roots: list[tuple[Job, Job]] = []

        def lookup(job_id: JobId) -> Job | None:
            return staged.get(job_id) or self._jobs.get(job_id)

        parents = {d for new in jobs for d in new.depends_on}
        for i, new in enumerate(jobs):
            payload_text = codec.dumps(new.payload)
            if new.idempotency_key is not None:
                key = (new.tenant, new.idempotency_key)
                existing_id = idem.get(key) or self._idem.get(key)
                if existing_id is not None:
                    existing = lookup(existing_id)
                    assert existing is not None
                    if (existing.task, existing.queue, codec.dumps(existing.payload)) != (
                        new.task,
                        new.queue,
                        payload_text,
                    ):
                        raise IdempotencyConflict(new.idempotency_key, existing_id)
                    out.append(existing)
                    created.append(False)
                    continue
            if new.id in staged or new.id in self._jobs:
                raise InvalidJob("id", f"a job with id {new.id} already exists")
            deps = []
            for dep_id in new.depends_on:
                dep = lookup(dep_id)
                if dep is None or dep.tenant != new.tenant:  # another tenant's job is not one this tenant can see
                    raise UnknownDependency(dep_id)
                deps.append(dep)
            broken = next((d for d in deps if d.final_state in BREAKS_DEPENDENTS), None)
            state = tr.initial_state(new, now, all(_succeeded(d) for d in deps))
            job = Job(
                id=new.id, tenant=new.tenant, queue=new.queue, task=new.task,
                payload=codec.loads(payload_text), priority=new.priority,
                run_at=new.run_at if new.run_at is not None else now, state=state, attempt=0,
                max_attempts=new.max_attempts, created_at=now, updated_at=now,
                idempotency_key=new.idempotency_key, depends_on=new.depends_on, timeout=new.timeout,
                phases=tr.phases_template(phases[i]) if i < len(phases) else (),
                run_id=new.run_id, schedule_id=new.schedule_id, has_dependents=new.id in parents,
                trace=new.trace,
            )  # fmt: skip
            new_events.append(ev.job_event(ev.ENQUEUED, job, {"priority": job.priority}))
            if broken is not None:
                job, e = tr.cancel(job, f"dependency {broken.id} ended {broken.final_state.value}", now)
                new_events.append(e)
                cancelled_roots.append((broken, job))
            staged[job.id] = job
            if new.idempotency_key is not None:
                idem[(new.tenant, new.idempotency_key)] = job.id
            out.append(job)
            created.append(True)
        # commit
        self._jobs.update(staged)
        self._idem.update(idem)
        for job in staged.values():
            for d in job.depends_on:
                self._dependents.setdefault(d, set()).add(job.id)
                parent = self._jobs.get(d)
                if parent is not None and not parent.has_dependents:
                    self._jobs[d] = replace(parent, has_dependents=True)
        extra: list[Job] = []
        for _, job in cancelled_roots:
            self._cascade_cancel(job, now, extra, new_events)
        events = self._append(new_events, now)
        return Inserted(jobs=out, created=created, events=events)

    async def fetch_jobs(
        self,
        queues: Sequence[str],
        limit: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed:
        async with self._lock:
            qs, names = set(queues), set(tasks) if tasks is not None else None
            ready = [
                j
                for j in self._jobs.values()
                if j.state in RUNNABLE
                and j.run_at <= now
                and j.queue in qs
                and (names is None or j.task in names)
                and (tenant is None or j.tenant == tenant)
            ]
            ready.sort(key=lambda j: (-j.priority, j.run_at, j.id))
            jobs, events = [], []
            for job in ready[: max(0, limit)]:
                job, e = tr.start(job, worker, new_lease_token(), now + lease_seconds, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
            return Changed(jobs, self._append(events, now))

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_until: float, now: float) -> Heartbeat:
        async with self._lock:
            held, cancel = set(), set()
            for lease in leases:
                job = self._held(lease.job_id, lease.token)
                if job is None:
                    continue
                self._jobs[job.id] = replace(job, lease_expires_at=lease_until, updated_at=now)
                held.add(job.id)
                if job.cancel_requested:
                    cancel.add(job.id)
            return Heartbeat(frozenset(held), frozenset(cancel))

    async def save_phases(self, updates: Sequence[PhaseUpdate], now: float) -> Changed:
        async with self._lock:
            jobs, events = [], []
            for u in updates:
                job = self._held(u.job_id, u.token)
                if job is None:
                    continue
                job = replace(job, phases=u.phases, progress=overall_progress(u.phases), updated_at=now)
                self._jobs[job.id] = job
                jobs.append(job)
                if u.event:
                    events.append(ev.job_event(ev.PHASE, job, {"phase_event": u.event, **(u.event_data or {})}))
            return Changed(jobs, self._append(events, now))

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        async with self._lock:
            jobs: list[Job] = []
            events: list[NewEvent] = []
            for c in completions:
                job = self._held(c.job_id, c.token)
                if job is None:
                    continue
                job, e = tr.succeed(job, c.result, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
                self._unblock_dependents(job, now, jobs, events)
            return Changed(jobs, self._append(events, now))

    async def fail_jobs(self, failures: Sequence[Failure], now: float) -> Changed:
        async with self._lock:
            jobs: list[Job] = []
            events: list[NewEvent] = []
            for f in failures:
                job = self._held(f.job_id, f.token)
                if job is None:
                    continue
                if f.only_if_expired_at is not None and not (
                    job.lease_expires_at is not None and job.lease_expires_at < f.only_if_expired_at
                ):
                    continue
                job, e = tr.fail(job, f.error, f.outcome, f.retry_at, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
                if f.outcome is not FailOutcome.RETRY:
                    self._cascade_cancel(job, now, jobs, events)
            return Changed(jobs, self._append(events, now))

    async def release_jobs(self, leases: Sequence[Lease], now: float) -> Changed:
        async with self._lock:
            jobs, events = [], []
            for lease in leases:
                job = self._held(lease.job_id, lease.token)
                if job is None:
                    continue
                job, e = tr.release(job, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
            return Changed(jobs, self._append(events, now))

    async def cancel_jobs(self, ids: Sequence[JobId], reason: str, now: float, tenant: str | None = None) -> Changed:
        async with self._lock:
            jobs: list[Job] = []
            events: list[NewEvent] = []
            for job_id in ids:
                job = self._jobs.get(job_id)
                if job is None or (tenant is not None and job.tenant != tenant) or job.terminal:
                    continue
                if job.state is JobState.RUNNING:
                    if job.cancel_requested:
                        continue
                    job = replace(job, cancel_requested=True, reason=reason, updated_at=now)
                    self._jobs[job.id] = job
                    jobs.append(job)
                    events.append(ev.job_event(ev.CANCEL_REQUESTED, job, {"reason": reason}))
                    continue
                job, e = tr.cancel(job, reason, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
                self._cascade_cancel(job, now, jobs, events)
            return Changed(jobs, self._append(events, now))

    async def retry_jobs(self, ids: Sequence[JobId], now: float, tenant: str | None = None) -> Changed:
        async with self._lock:
            jobs, events = [], []
            for job_id in ids:
                job = self._jobs.get(job_id)
                if job is None or (tenant is not None and job.tenant != tenant):
                    continue
                if job.state not in (JobState.DEAD, JobState.CANCELLED, JobState.FAILED):
                    continue
                job, e = tr.retry_now(job, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
            return Changed(jobs, self._append(events, now))

    async def prune_jobs(self, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
        async with self._lock:
            events: list[NewEvent] = []
            staled = deleted = 0
            for job in sorted(self._jobs.values(), key=lambda j: j.id):
                if staled + deleted >= limit:
                    break
                finished = job.finished_at if job.finished_at is not None else job.updated_at
                if job.state is JobState.STALE and finished < delete_before:
                    del self._jobs[job.id]
                    if job.idempotency_key is not None:
                        self._idem.pop((job.tenant, job.idempotency_key), None)
                    for d in job.depends_on:
                        self._dependents.get(d, set()).discard(job.id)
                    events.append(ev.job_event(ev.DELETED, job))
                    deleted += 1
                elif job.state in TERMINAL and finished < stale_before:
                    job, e = tr.make_stale(job, now)
                    self._jobs[job.id] = job
                    events.append(e)
                    staled += 1
            return Pruned(staled, deleted, self._append(events, now))

    # -- reads --------------------------------------------------------------------------------------
    async def expired_jobs(self, now: float, limit: int) -> list[Job]:
        expired = [
            j
            for j in self._jobs.values()
            if j.state is JobState.RUNNING and j.lease_expires_at is not None and j.lease_expires_at < now
        ]
        return sorted(expired, key=lambda j: j.id)[:limit]

    async def list_jobs(self, filter: JobFilter) -> list[Job]:
        out = []
        for job in sorted(self._jobs.values(), key=lambda j: j.id, reverse=True):
            if filter_matches(filter, job, codec.dumps(job.payload)):
                out.append(job)
                if len(out) >= filter.limit:
                    break
        return out

    async def count_jobs(self, tenant: str | None = None, *, finished: bool = True) -> dict[tuple[str, JobState], int]:
        counts: dict[tuple[str, JobState], int] = {}
        for job in self._jobs.values():
            if (tenant is None or job.tenant == tenant) and (finished or job.state in UNFINISHED):
                counts[(job.queue, job.state)] = counts.get((job.queue, job.state), 0) + 1
        return counts

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        qs, names = set(queues), set(tasks) if tasks is not None else None
        times = [
            j.run_at
            for j in self._jobs.values()
            if j.state in RUNNABLE and j.queue in qs and (names is None or j.task in names)
        ]
        return min(times) if times else None

    async def list_events(
        self, after_id: int, limit: int, job_id: JobId | None = None, tenant: str | None = None
    ) -> list[Event]:
        out = []
        # ids are 1..n in list order, so start right after after_id
        for e in self._events[max(0, after_id) :]:
            if (job_id is None or e.job_id == job_id) and (tenant is None or e.tenant == tenant):
                out.append(e)
                if len(out) >= limit:
                    break
        return out
