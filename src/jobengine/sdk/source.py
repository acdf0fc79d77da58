"""A :class:`~jobengine.worker.source.WorkerSource` over HTTP, so the in-process :class:`Worker` runtime runs
unchanged against a remote server: the same pump, heartbeats, phases, batching and graceful shutdown.

Each transition is one call of the worker protocol (``/api/v1/worker``); the server applies it through the
same fenced engine transitions as an in-process worker, so a report about a lease this worker lost is
refused there. Differences from the in-process source:

- claims ask only for the tasks this worker has handlers for, and long-poll (``long_poll`` seconds) instead
  of waiting on a notifier; :meth:`interrupt` ends a long-poll at once (shutdown);
- expired leases are rescued by the server (``jobengine serve`` runs the rescuer), not by the worker;
- retry delays travel as durations, so the worker's and the server's clocks need not agree;
- a graph node's parents' results are one more call, made only when the handler asks for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from jobengine.core.clock import Clock, SystemClock, iso
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed, Completion, FailOutcome, Failure, Heartbeat, Job, Json, Lease, PhaseUpdate
from jobengine.errors import ResultsTooLarge
from jobengine.ports.workers import WorkerInfo
from jobengine.sdk.client import ApiClient, ApiError
from jobengine.sdk.convert import job_from_json
from jobengine.tasks import TaskRegistry

_PREFIX = "/api/v1/worker"
#: The problem type of a node whose parents' results are past the size it may receive.
RESULTS_TOO_LARGE = "urn:jobengine:problem:results-too-large"


class _ClaimPacer:
    """The runtime's Notifier. The claim itself long-polls, so after an empty claim there is nothing to wait
    for; a short pause only keeps a server that answers at once (no long-poll) from being asked in a loop."""

    def notify(self) -> None:
        return None

    async def wait(self, timeout: float) -> bool:
        await asyncio.sleep(min(timeout, 0.05))
        return True

    async def close(self) -> None:
        return None


class HttpWorkerSource:
    def __init__(
        self,
        client: ApiClient,
        tasks: TaskRegistry,
        *,
        long_poll: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.tasks = tasks
        self.clock: Clock = clock or SystemClock()
        self.long_poll = long_poll
        self._pacer = _ClaimPacer()
        self._stopping = asyncio.Event()
        self._held: dict[JobId, Job] = {}  # claimed jobs, to answer "which are still held" with Jobs
        self._info: dict[str, Any] = {}  # what the server's registry of live workers shows of this worker

    def notifier(self) -> _ClaimPacer:
        return self._pacer

    def interrupt(self) -> None:
        """Stop claiming: a long-poll in progress returns nothing at once, later claims return nothing."""
        self._stopping.set()

    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker: WorkerId, lease_seconds: float, *, tasks: Sequence[str]
    ) -> list[Job]:
        if self._stopping.is_set() or limit <= 0:
            return []
        body = {"worker_id": worker, "queues": list(queues), "tasks": list(tasks), "limit": min(limit, 100),
                "lease_seconds": float(lease_seconds), "wait": float(self.long_poll), **self._info}  # fmt: skip
        claim = asyncio.ensure_future(self.client.post(f"{_PREFIX}/claim", body, timeout=self.long_poll + 30.0))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([claim, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not claim.done():
            # Shutting down: drop the long-poll. A job the server leased in this very instant is rescued when
            # its lease expires.
            claim.cancel()
            with contextlib.suppress(BaseException):
                await claim
            return []
        jobs = [job_from_json(c["job"], c["lease"]) for c in claim.result()["jobs"]]
        for job in jobs:
            self._held[job.id] = job
        return jobs

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> Heartbeat:
        if not leases:
            return Heartbeat(frozenset(), frozenset())
        body = {"leases": [{"job_id": x.job_id, "token": x.token} for x in leases], "lease_seconds": lease_seconds}
        # A heartbeat that cannot get through within a third of the lease is of no use any more.
        out = await self.client.request("POST", f"{_PREFIX}/heartbeat", json=body, max_elapsed=lease_seconds / 3)
        for lost in out["lost"]:
            self._held.pop(JobId(lost), None)
        return Heartbeat(frozenset(JobId(i) for i in out["held"]), frozenset(JobId(i) for i in out["cancel_requested"]))

    async def save_phases(self, updates: Sequence[PhaseUpdate]) -> Changed:
        if not updates:
            return Changed()
        body = {"updates": [_phase_update(u) for u in updates]}
        out = await self.client.post(f"{_PREFIX}/phases", body)
        return Changed([self._held[JobId(i)] for i in out["held"] if JobId(i) in self._held])

    async def complete_jobs(self, completions: Sequence[Completion]) -> Changed:
        body = {"completions": [_completion(c) for c in completions]}
        return await self._report(body, "completed")

    async def fail_jobs(self, failures: Sequence[Failure]) -> Changed:
        now = self.clock.now()
        return await self._report({"failures": [_failure(f, now) for f in failures]}, "failed")

    async def release_jobs(self, leases: Sequence[Lease]) -> Changed:
        return await self._report({"releases": [{"job_id": x.job_id, "token": x.token} for x in leases]}, "released")

    async def _report(self, body: dict[str, Any], key: str) -> Changed:
        out = await self.client.post(f"{_PREFIX}/report", body)
        done = [self._held.pop(JobId(i)) for i in out[key] if JobId(i) in self._held]
        # Refused, or (a completion whose added nodes the graph refused) ended dead instead: no longer held.
        for other in (*out["refused"], *out.get("failed", ())):
            self._held.pop(JobId(other), None)
        return Changed(done)

    async def rescue_jobs(self) -> Changed:
        return Changed()  # the server rescues expired leases

    async def register_worker(self, info: WorkerInfo) -> WorkerInfo:
        """Kept to send with every claim: the server registers a remote worker when it claims."""
        self._info = {"host": info.host, "pid": info.pid, "version": info.version, "packs": list(info.packs),
                      "concurrency": info.concurrency}  # fmt: skip
        return info

    async def beat_worker(self, worker: WorkerId) -> bool:
        return True  # its claims and heartbeats keep its row fresh

    async def unregister_worker(self, worker: WorkerId) -> None:
        return None  # its row expires

    async def rescue_dead_workers(self) -> Changed:
        return Changed()  # the server's workers do

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str]) -> float | None:
        return None  # the claim's long-poll waits for the next job

    async def parent_results(self, job: Job) -> dict[str, Json]:
        """Read from the server when the handler asks (``GET .../jobs/{id}/parent-results``), like the
        in-process source reads the store. ResultsTooLarge (the job goes dead) past the size a node may
        receive."""
        if job.graph_id is None:
            return {}
        try:
            out = await self.client.get(f"{_PREFIX}/jobs/{quote(job.id, safe='')}/parent-results")
        except ApiError as exc:
            if exc.status == 409 and exc.problem.get("type") == RESULTS_TOO_LARGE:
                raise ResultsTooLarge(int(exc.problem.get("size") or 0), int(exc.problem.get("limit") or 0)) from exc
            raise
        results: dict[str, Json] = out["results"]
        return results


def _phase_update(u: PhaseUpdate) -> dict[str, Any]:
    phases = [
        {"name": p.name, "state": p.state.value, "progress": min(1.0, max(0.0, float(p.progress))),
         "message": (p.message or "")[:2000] or None, "result": p.result, "checkpoint": p.checkpoint,
         "started_at": iso(p.started_at), "finished_at": iso(p.finished_at)}
        for p in u.phases
    ]  # fmt: skip
    data = dict(u.event_data) if u.event_data is not None else None
    return {"job_id": u.job_id, "token": u.token, "phases": phases, "event": u.event, "event_data": data}


def _failure(f: Failure, now: float) -> dict[str, Any]:
    error = {"type": f.error.type[:200] or "Exception", "message": f.error.message[:2000],
             "traceback": (f.error.traceback or "")[-20_000:] or None}  # fmt: skip
    out: dict[str, Any] = {"job_id": f.job_id, "token": f.token, "error": error}
    if f.outcome is FailOutcome.CANCELLED:
        out["cancelled"] = True
    elif f.outcome is FailOutcome.DEAD:
        out["retryable"] = False
    else:
        out["retry_delay"] = max(0.0, (f.retry_at or now) - now)
    return out


def _completion(c: Completion) -> dict[str, Any]:
    """A completion as the report carries it, with the graph nodes it adds (the worker protocol's shape)."""
    body: dict[str, Any] = {"job_id": c.job_id, "token": c.token, "result": c.result}
    if c.nodes:
        body["nodes"] = [
            {"name": n.name, "task": n.task, "payload": n.payload, "after": list(n.after), "before": list(n.before),
             "policy": n.policy, "queue": n.queue, "priority": n.priority, "max_attempts": n.max_attempts,
             "timeout": n.timeout}
            for n in c.nodes
        ]  # fmt: skip
    return body
