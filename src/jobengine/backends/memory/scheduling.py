"""The scheduling ports in memory: the reference for the contract suite. Shares the MemoryStore's lock and
event log, so a claim writes its ticks, runs, jobs and events as one step, like a transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from jobengine.core import firing
from jobengine.core import runs as rn
from jobengine.core import signatures as sg
from jobengine.core.ids import JobId, RunId, ScheduleId
from jobengine.core.models import Event, NewEvent
from jobengine.core.runs import ACTIVE_RUN_STATES, JobOutcome, Run, RunFilter, RunState, Segment
from jobengine.core.schedules import Schedule, ScheduleFilter
from jobengine.core.signatures import Signature, SignatureFilter, SignatureHit, SignatureStatus
from jobengine.errors import AlreadyExists, IllegalState, NotFound
from jobengine.ports.schedules import Fired, PlannedRun, TickClaim

if TYPE_CHECKING:
    from jobengine.backends.memory.store import MemoryStore
    from jobengine.ports.schedules import SchedulingStore


class MemoryScheduling:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._schedules: dict[ScheduleId, Schedule] = {}
        self._ticks: dict[tuple[ScheduleId, int], RunId | None] = {}
        self._tick_times: dict[tuple[ScheduleId, int], float] = {}  # when each tick was fired (retention)
        self._runs: dict[RunId, Run] = {}
        self._segments: dict[JobId, Segment] = {}
        self._by_run: dict[RunId, list[JobId]] = {}
        self._signatures: dict[tuple[str, str], Signature] = {}

    def _append(self, events: Iterable[NewEvent], now: float) -> list[Event]:
        return self._store._append(events, now)

    # -- schedules ----------------------------------------------------------------------------------
    def _name_taken(self, schedule: Schedule) -> bool:
        return any(
            s.tenant == schedule.tenant and s.name == schedule.name and s.id != schedule.id
            for s in self._schedules.values()
        )

    async def insert_schedule(self, schedule: Schedule, event: NewEvent) -> tuple[Schedule, list[Event]]:
        async with self._store._lock:
            if self._name_taken(schedule) or schedule.id in self._schedules:
                raise AlreadyExists("schedule", schedule.name)
            self._schedules[schedule.id] = schedule
            return schedule, self._append([event], schedule.updated_at)

    async def update_schedule(
        self, schedule: Schedule, expected_version: int, event: NewEvent
    ) -> tuple[Schedule, list[Event]]:
        async with self._store._lock:
            current = self._schedules.get(schedule.id)
            if current is None:
                raise NotFound("schedule", schedule.id)
            if current.version != expected_version:
                raise IllegalState(f"schedule {schedule.id} changed meanwhile; read it again and retry")
            if self._name_taken(schedule):
                raise AlreadyExists("schedule", schedule.name)
            self._schedules[schedule.id] = schedule
            return schedule, self._append([event], schedule.updated_at)

    async def delete_schedule(
        self, schedule_id: ScheduleId, tenant: str | None, now: float, event: NewEvent
    ) -> list[Event]:
        async with self._store._lock:
            current = self._schedules.get(schedule_id)
            if current is None or (tenant is not None and current.tenant != tenant):
                raise NotFound("schedule", schedule_id)
            del self._schedules[schedule_id]
            return self._append([event], now)

    async def get_schedules(self, ids: Sequence[ScheduleId], tenant: str | None = None) -> list[Schedule]:
        return [s for i in ids if (s := self._schedules.get(i)) is not None and (tenant is None or s.tenant == tenant)]

    async def find_schedule(self, tenant: str, name: str) -> Schedule | None:
        return next((s for s in self._schedules.values() if s.tenant == tenant and s.name == name), None)

    async def list_schedules(self, filter: ScheduleFilter) -> list[Schedule]:
        out = [
            s
            for s in self._schedules.values()
            if (filter.tenant is None or s.tenant == filter.tenant)
            and (filter.name is None or s.name == filter.name)
            and (filter.enabled is None or s.enabled == filter.enabled)
        ]
        return sorted(out, key=lambda s: (s.tenant, s.name))[: filter.limit]

    async def due_schedules(self, now: float, limit: int) -> list[Schedule]:
        due = [s for s in self._schedules.values() if s.next_fire_at is not None and s.next_fire_at <= now]
        return sorted(due, key=lambda s: (s.next_fire_at or 0.0, s.id))[:limit]

    async def next_fire_at(self) -> float | None:
        times = [s.next_fire_at for s in self._schedules.values() if s.next_fire_at is not None]
        return min(times) if times else None

    # -- firing -------------------------------------------------------------------------------------
    def _active(self, schedule_id: ScheduleId, states: frozenset[RunState] = ACTIVE_RUN_STATES) -> bool:
        return any(r.schedule_id == schedule_id and r.state in states for r in self._runs.values())

    def _write_run(self, planned: PlannedRun, now: float, out: Fired, *, with_jobs: bool = True) -> None:
        run = planned.run
        if with_jobs and planned.jobs:
            inserted = self._store.insert_locked(planned.jobs, now, planned.phases or [()] * len(planned.jobs))
            out.jobs.extend(inserted.jobs)
            out.events.extend(inserted.events)
            ids = []
            for i, job in enumerate(inserted.jobs):
                items = planned.items[i] if i < len(planned.items) else 0
                self._segments[job.id] = Segment(run.id, job.id, i, items)
                ids.append(job.id)
            self._by_run[run.id] = ids
        self._runs[run.id] = run
        out.runs.append(run)
        out.events.extend(self._append([rn.run_event(rn.RUN_CREATED, run)], now))

    async def fire_ticks(self, claim: TickClaim, now: float) -> Fired | None:
        async with self._store._lock:
            current = self._schedules.get(claim.schedule_id)
            if (
                current is None
                or not current.enabled
                or current.version != claim.version
                or current.cursor != claim.cursor
            ):
                return None
            out = Fired()
            for planned in claim.runs:
                assert planned.run.tick is not None
                key = (claim.schedule_id, firing.tick_key(planned.run.tick))
                if key in self._ticks:
                    continue  # fired already: never twice
                action = firing.overlap_action(claim.overlap, self._active(claim.schedule_id))
                self._tick_times[key] = now
                if action is firing.TickAction.SKIP:
                    self._ticks[key] = None
                    out.skipped.append(planned.run.tick)
                    event = firing.skipped_event(current.tenant, current.id, planned.run.tick)
                    out.events.extend(self._append([event], now))
                    continue
                if action is firing.TickAction.DEFER:
                    planned = PlannedRun(firing.deferred(planned.run))
                self._ticks[key] = planned.run.id
                self._write_run(planned, now, out)
            self._schedules[current.id] = replace(current, cursor=claim.new_cursor, next_fire_at=claim.next_fire_at)
            out.events.extend(self._append(claim.events, now))
            return out

    async def insert_run(self, planned: PlannedRun, now: float, event: NewEvent | None = None) -> Fired:
        async with self._store._lock:
            out = Fired()
            self._write_run(planned, now, out)
            if event is not None:
                out.events.extend(self._append([event], now))
            return out

    async def waiting_runs(self, limit: int) -> list[Run]:
        busy = {RunState.QUEUED, RunState.RUNNING}
        first: dict[ScheduleId, Run] = {}
        for run in sorted(self._runs.values(), key=lambda r: r.id):
            if run.state is RunState.PLANNING and run.schedule_id not in first:
                first[run.schedule_id] = run
        ready = [r for r in first.values() if not self._active(r.schedule_id, frozenset(busy))]
        return sorted(ready, key=lambda r: r.id)[:limit]

    async def plan_waiting_run(self, planned: PlannedRun, now: float) -> Fired | None:
        async with self._store._lock:
            run = self._runs.get(planned.run.id)
            busy = frozenset({RunState.QUEUED, RunState.RUNNING})
            if run is None or run.state is not RunState.PLANNING or self._active(run.schedule_id, busy):
                return None
            out = Fired()
            self._write_run(planned, now, out)
            return out

    # -- progress -----------------------------------------------------------------------------------
    async def start_runs(self, ids: Sequence[RunId], now: float) -> list[Event]:
        async with self._store._lock:
            events: list[NewEvent] = []
            for run_id in dict.fromkeys(ids):
                run = self._runs.get(run_id)
                if run is not None:
                    run, new = rn.start(run, now)
                    self._runs[run.id] = run
                    events.extend(new)
            return self._append(events, now)

    async def record_outcomes(self, outcomes: Sequence[JobOutcome], now: float) -> list[Event]:
        async with self._store._lock:
            events: list[NewEvent] = []
            for o in outcomes:
                segment = self._segments.get(o.job_id)
                run = self._runs.get(o.run_id)
                if segment is None or run is None or segment.run_id != run.id:
                    continue
                run, segment, new = rn.apply_outcome(run, segment, o.outcome, o.duration, now)
                self._runs[run.id] = run
                self._segments[segment.job_id] = segment
                events.extend(new)
            return self._append(events, now)

    async def cancel_run(
        self, run_id: RunId, tenant: str | None, reason: str, actor: str, now: float
    ) -> tuple[Run, list[Event]]:
        async with self._store._lock:
            run = self._runs.get(run_id)
            if run is None or (tenant is not None and run.tenant != tenant):
                raise NotFound("run", run_id)
            run, events = rn.cancel(run, reason, actor, now)
            self._runs[run.id] = run
            return run, self._append(events, now)

    # -- reads --------------------------------------------------------------------------------------
    async def get_runs(self, ids: Sequence[RunId], tenant: str | None = None) -> list[Run]:
        return [r for i in ids if (r := self._runs.get(i)) is not None and (tenant is None or r.tenant == tenant)]

    async def list_runs(self, filter: RunFilter) -> list[Run]:
        out = []
        for run in sorted(self._runs.values(), key=lambda r: r.id, reverse=True):
            if (
                (filter.before_id is not None and run.id >= filter.before_id)
                or (filter.tenant is not None and run.tenant != filter.tenant)
                or (filter.schedule_id is not None and run.schedule_id != filter.schedule_id)
                or (filter.states and run.state not in filter.states)
                or (filter.trigger is not None and run.trigger is not filter.trigger)
                or (filter.created_after is not None and run.created_at < filter.created_after)
                or (filter.created_before is not None and run.created_at >= filter.created_before)
            ):
                continue
            out.append(run)
            if len(out) >= filter.limit:
                break
        return out

    async def run_segments(self, run_id: RunId) -> list[Segment]:
        return [self._segments[j] for j in self._by_run.get(run_id, [])]

    async def active_runs(self, limit: int, after_id: RunId | None = None) -> list[Run]:
        busy = (RunState.QUEUED, RunState.RUNNING)
        runs = sorted(
            (r for r in self._runs.values() if r.state in busy and (after_id is None or r.id > after_id)),
            key=lambda r: r.id,
        )
        return runs[:limit]

    async def prune_runs(self, before: float, limit: int) -> int:
        async with self._store._lock:
            return self._prune_runs(before, limit)

    def _prune_runs(self, before: float, limit: int) -> int:
        ended = sorted(
            (r for r in self._runs.values() if r.ended and r.finished_at is not None and r.finished_at < before),
            key=lambda r: r.finished_at or 0.0,
        )[:limit]
        for run in ended:
            del self._runs[run.id]
            for job_id in self._by_run.pop(run.id, []):
                self._segments.pop(job_id, None)
        old = [key for key, fired_at in self._tick_times.items() if fired_at < before][:limit]
        for key in old:
            del self._ticks[key], self._tick_times[key]
        return len(ended) + len(old)

    # -- signatures ---------------------------------------------------------------------------------
    async def record_signatures(self, hits: Sequence[SignatureHit], now: float) -> None:
        async with self._store._lock:
            for hit in hits:
                key = (hit.tenant, hit.fingerprint.key)
                self._signatures[key] = sg.record(self._signatures.get(key), hit)

    async def non_retryable_signatures(self) -> set[tuple[str, str]]:
        return {k for k, s in self._signatures.items() if s.non_retryable}

    async def get_signature(self, tenant: str, key: str) -> Signature | None:
        return self._signatures.get((tenant, key))

    async def list_signatures(self, filter: SignatureFilter) -> list[Signature]:
        out = [
            s
            for s in self._signatures.values()
            if (filter.tenant is None or s.tenant == filter.tenant)
            and (not filter.statuses or s.status in filter.statuses)
            and (filter.task is None or s.task == filter.task)
        ]
        return sorted(out, key=lambda s: (-s.last_seen, s.key))[: filter.limit]

    async def update_signature(
        self,
        tenant: str,
        key: str,
        status: SignatureStatus | None,
        non_retryable: bool | None,
        now: float,
        event: NewEvent,
    ) -> tuple[Signature, list[Event]]:
        async with self._store._lock:
            current = self._signatures.get((tenant, key))
            if current is None:
                raise NotFound("signature", key)
            updated = replace(
                current,
                status=status if status is not None else current.status,
                non_retryable=non_retryable if non_retryable is not None else current.non_retryable,
                updated_at=now,
            )
            self._signatures[(tenant, key)] = updated
            return updated, self._append([event], now)


if TYPE_CHECKING:

    def _conforms(s: MemoryScheduling) -> SchedulingStore:  # mypy checks the class against both ports here
        return s
