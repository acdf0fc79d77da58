"""Flow control (:class:`jobengine.ports.flow.FlowStore`) for the in-memory store: the limits, the token
buckets and the limited claim, all under the store's lock. Mixed into :class:`MemoryStore`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobengine.core import transitions as tr
from jobengine.core.flow.bucket import Bucket
from jobengine.core.flow.keys import payload_key
from jobengine.core.flow.limits import FlowLimits
from jobengine.core.flow.select import Candidate, ClaimRule, key_of, select
from jobengine.core.ids import JobId, WorkerId, new_lease_token
from jobengine.core.models import Changed, Event, Job, NewEvent
from jobengine.core.states import RUNNABLE, JobState
from jobengine.ports.flow import FlowCounts


@dataclass
class _FlowState:
    limits: dict[str, FlowLimits] = field(default_factory=dict)
    buckets: dict[str, Bucket] = field(default_factory=dict)


def _candidate(rule: ClaimRule, job: Job) -> Candidate:
    name = rule.payload_field
    return Candidate(job.id, job.tenant, job.task, payload_key(job.payload, name) if name else None)


class MemoryFlowMixin:
    _flow_state: _FlowState | None = None
    _jobs: dict[JobId, Job]  # MemoryStore's
    _lock: asyncio.Lock

    if TYPE_CHECKING:

        def _append(self, events: Iterable[NewEvent], now: float) -> list[Event]: ...

    def _flow(self) -> _FlowState:
        if self._flow_state is None:
            self._flow_state = _FlowState()
        return self._flow_state

    async def list_flow_limits(self) -> list[FlowLimits]:
        limits = self._flow().limits
        return [limits[q] for q in sorted(limits)]

    async def set_flow_limits(self, limits: FlowLimits) -> None:
        self._flow().limits[limits.queue] = limits

    async def delete_flow_limits(self, queue: str) -> None:
        self._flow().limits.pop(queue, None)

    async def flow_counts(self) -> FlowCounts:
        depth: dict[str, int] = {}
        running: dict[str, int] = {}
        for j in self._jobs.values():
            if j.state in RUNNABLE:
                depth[j.queue] = depth.get(j.queue, 0) + 1
            elif j.state is JobState.RUNNING:
                running[j.queue] = running.get(j.queue, 0) + 1
        return FlowCounts(depth, running)

    async def claim_limited(
        self, rule: ClaimRule, limit: int, worker: WorkerId, lease_seconds: float, now: float
    ) -> Changed:
        state = self._flow()
        async with self._lock:
            mine = [j for j in self._jobs.values() if j.queue == rule.queue]
            running = [j for j in mine if j.state is JobState.RUNNING]
            ready = sorted((j for j in mine if j.state in RUNNABLE and j.run_at <= now
                            and (rule.tasks is None or j.task in rule.tasks)
                            and (rule.tenant is None or j.tenant == rule.tenant)
                            and (rule.ids is None or j.id in rule.ids)),
                           key=lambda j: (-j.priority, j.run_at, j.id))[: rule.candidates(limit)]  # fmt: skip
            key_running: dict[str, int] = {}
            if rule.key is not None:
                for j in running:
                    k = key_of(rule, _candidate(rule, j))
                    if k is not None:
                        key_running[k] = key_running.get(k, 0) + 1
            chosen = select(
                rule,
                [_candidate(rule, j) for j in ready],
                queue_running=len(running),
                key_running=key_running,
                buckets=state.buckets,
                now=now,
                limit=limit,
            )
            state.buckets.update(chosen.buckets)
            jobs, events = [], []
            for job_id in chosen.ids:
                job, e = tr.start(self._jobs[JobId(job_id)], worker, new_lease_token(), now + lease_seconds, now)
                self._jobs[job.id] = job
                jobs.append(job)
                events.append(e)
            return Changed(jobs, self._append(events, now))
