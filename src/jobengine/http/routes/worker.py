"""``/api/v1/worker``: the worker protocol, for workers that cannot reach the store (scope ``worker``).

The same lease and fencing as in-process workers, because these routes call the same engine transitions:
- ``claim`` leases up to ``limit`` jobs of the key's tenant (of some queues, optionally only some tasks),
  long-polling up to ``wait`` seconds when there is none; each comes with its lease token;
- ``heartbeat`` extends leases; a lease no longer held (expired and taken by another worker, or the job
  was rescued) means the worker must stop that job and report nothing about it. The per-job form answers
  409 for a lost lease;
- ``jobs/{id}/parent-results`` reads what a graph node receives from its parents (a claimed node carries
  ``graph``: its graph's id and its node name); read on demand, so a claim of plain jobs reads nothing more
  and a claim answer stays bounded whatever the nodes' parents returned;
- ``phases`` stores phase records, progress and checkpoints; ``complete`` / ``fail`` / ``release`` end the
  attempt. Every one is fenced by the token: a late report from a worker that lost its lease is refused
  (409 per job, ``refused`` in a batch) and changes nothing.
Another tenant's job answers 404 (per job) or is refused (batch), exactly like a job that does not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from jobengine.core.clock import iso
from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import (
    AddedNode,
    AttemptError,
    Completion,
    FailOutcome,
    Failure,
    Job,
    Lease,
    Phase,
    PhaseState,
    PhaseUpdate,
)
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import ResultsTooLarge
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.problems import ProblemError
from jobengine.http.responses import READ_ONE_IF, WRITE, WRITE_ONE, json_response
from jobengine.http.routes.jobs import JobIdPath
from jobengine.http.worker_schemas import (
    ClaimIn,
    ClaimOut,
    CompleteIn,
    FailIn,
    HeartbeatIn,
    HeartbeatOut,
    HeldOut,
    JobHeartbeatIn,
    JobHeartbeatOut,
    ParentResultsOut,
    PhasesBatchIn,
    PhasesIn,
    ReleaseIn,
    ReportIn,
    ReportOut,
)
from jobengine.ports.workers import WorkerInfo
from jobengine.serialize import job_to_json

router = APIRouter(prefix="/api/v1/worker", tags=["worker"])
Worker = Annotated[Principal, Depends(require("worker"))]
RESULTS_TOO_LARGE = "urn:jobengine:problem:results-too-large"
_POLL = 0.5  # seconds between claims of a long-poll, at most (the notifier usually wakes it sooner)


def _lost(job_id: str) -> ProblemError:
    return ProblemError(409, f"the lease of job {job_id} is not held: stop the job and report nothing",
                        field="token", type_="urn:jobengine:problem:lease-lost")  # fmt: skip


async def _owned(engine: Engine, tenant: str, ids: Sequence[str]) -> dict[str, Job]:
    return {j.id: j for j in await engine.get_jobs(list(dict.fromkeys(ids)), tenant)}


def _phase(p: PhasesIn, job_id: str) -> PhaseUpdate:
    phases = tuple(
        Phase(
            name=x.name, state=PhaseState(x.state), progress=x.progress, result=x.result, checkpoint=x.checkpoint,
            message=x.message, started_at=x.started_at.timestamp() if x.started_at else None,
            finished_at=x.finished_at.timestamp() if x.finished_at else None,
        )
        for x in p.phases
    )  # fmt: skip
    return PhaseUpdate(JobId(job_id), LeaseToken(p.token), phases, p.event, p.event_data)


def _failure(engine: Engine, job: Job, f: FailIn) -> Failure:
    now = engine.clock.now()
    spec = engine.tasks.get(job.task)
    error = AttemptError(job.attempt, now, f.error.type, f.error.message or f.error.type, f.error.traceback,
                         job.lease_worker)  # fmt: skip
    if f.cancelled:
        return Failure(job.id, LeaseToken(f.token), error, FailOutcome.CANCELLED)
    if not f.retryable or job.attempt >= job.max_attempts:
        return Failure(job.id, LeaseToken(f.token), error, FailOutcome.DEAD)
    delay = f.retry_delay if f.retry_delay is not None else (spec.retry if spec else RetryPolicy()).delay(job.attempt)
    return Failure(job.id, LeaseToken(f.token), error, FailOutcome.RETRY, retry_at=now + delay)


def _claimed(job: Job, nodes: Mapping[JobId, str]) -> dict[str, object]:
    node = nodes.get(job.id)
    return {
        "job": job_to_json(job), "lease": {"token": job.lease_token, "expires_at": iso(job.lease_expires_at)},
        "graph": {"id": job.graph_id, "node": node} if job.graph_id is not None and node is not None else None,
    }  # fmt: skip


@router.post("/claim", response_model=ClaimOut, responses=WRITE)
async def claim(body: ClaimIn, request: Request, principal: Worker) -> Response:
    """Lease up to ``limit`` runnable jobs of the tenant; with ``wait``, hold the request until one is
    runnable or ``wait`` seconds passed (capped by the server's ``claim_max_wait``)."""
    ctx = context(request)
    engine = ctx.engine
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(body.wait, ctx.settings.claim_max_wait)
    await engine.fleet.seen_remote(
        WorkerInfo(
            id=WorkerId(body.worker_id), kind="remote", host=body.host or "", pid=body.pid or 0,
            version=body.version or "", queues=tuple(body.queues), tasks=tuple(body.tasks or ()),
            packs=tuple(body.packs or ()), concurrency=body.concurrency or 0, tenant=principal.tenant,
        ),
        ctx.settings.claim_max_wait,
    )  # fmt: skip
    while True:
        jobs = await engine.transitions.fetch_jobs(
            body.queues, body.limit, WorkerId(body.worker_id), body.lease_seconds,
            tasks=body.tasks, tenant=principal.tenant,
        )  # fmt: skip
        remaining = deadline - loop.time()
        if jobs or remaining <= 0 or ctx.closing or await request.is_disconnected():
            break
        await engine.notifier().wait(min(remaining, _POLL))
    nodes = await engine.graphs.node_names(jobs) if any(j.graph_id is not None for j in jobs) else {}
    return json_response({"jobs": [_claimed(j, nodes) for j in jobs]})


@router.post("/heartbeat", response_model=HeartbeatOut, responses=WRITE)
async def heartbeat(body: HeartbeatIn, request: Request, principal: Worker) -> Response:
    """Extend the leases still held; report lost ones and cancel requests."""
    engine = context(request).engine
    owned = await _owned(engine, principal.tenant, [x.job_id for x in body.leases])
    leases = [Lease(JobId(x.job_id), LeaseToken(x.token)) for x in body.leases if x.job_id in owned]
    hb = await engine.transitions.heartbeat_jobs(leases, body.lease_seconds)
    asked = list(dict.fromkeys(x.job_id for x in body.leases))
    return json_response({
        "held": [i for i in asked if i in hb.held], "lost": [i for i in asked if i not in hb.held],
        "cancel_requested": [i for i in asked if i in hb.cancel_requested],
    })  # fmt: skip


@router.post("/phases", response_model=HeldOut, responses=WRITE)
async def save_phases(body: PhasesBatchIn, request: Request, principal: Worker) -> Response:
    """Store phase records (progress, results, checkpoints) of running jobs, fenced by their tokens."""
    engine = context(request).engine
    owned = await _owned(engine, principal.tenant, [u.job_id for u in body.updates])
    changed = await engine.transitions.save_phases([_phase(u, u.job_id) for u in body.updates if u.job_id in owned])
    held = {j.id for j in changed.jobs}
    asked = list(dict.fromkeys(u.job_id for u in body.updates))
    return json_response({"held": [i for i in asked if i in held], "lost": [i for i in asked if i not in held]})


@router.post("/report", response_model=ReportOut, responses=WRITE)
async def report(body: ReportIn, request: Request, principal: Worker) -> Response:
    """Completions, failures and releases in one call (each kind one transaction)."""
    engine = context(request).engine
    ids = [
        *(c.job_id for c in body.completions),
        *(f.job_id for f in body.failures),
        *(r.job_id for r in body.releases),
    ]
    owned = await _owned(engine, principal.tenant, ids)
    completions = [Completion(JobId(c.job_id), LeaseToken(c.token), c.result, _added(c)) for c in body.completions
                   if c.job_id in owned]  # fmt: skip
    failures = [_failure(engine, owned[f.job_id], f) for f in body.failures if f.job_id in owned]
    releases = [Lease(JobId(r.job_id), LeaseToken(r.token)) for r in body.releases if r.job_id in owned]
    done = await engine.transitions.complete_jobs(completions) if completions else None
    failed = await engine.transitions.fail_jobs(failures) if failures else None
    released = await engine.transitions.release_jobs(releases) if releases else None
    # A completion whose added nodes its graph refused ended its node dead: listed as failed.
    refused = _applied([c.job_id for c in completions], done.jobs if done else [], JobState.DEAD)
    out = {
        "completed": _applied([c.job_id for c in completions], done.jobs if done else [], JobState.SUCCEEDED),
        "failed": [*refused, *_applied([f.job_id for f in failures], failed.jobs if failed else [], None)],
        "released": _applied([r.job_id for r in releases], released.jobs if released else [], JobState.QUEUED),
    }
    applied = {i for v in out.values() for i in v}
    out["refused"] = [i for i in dict.fromkeys(ids) if i not in applied]
    return json_response(out)


def _added(body: CompleteIn) -> tuple[AddedNode, ...]:
    return tuple(
        AddedNode(
            n.name, n.task, n.payload, tuple(n.after), tuple(n.before), n.policy.value, n.queue, n.priority,
            n.max_attempts, n.timeout,
        )
        for n in body.nodes
    )  # fmt: skip


def _applied(ids: Sequence[str], jobs: Sequence[Job], state: JobState | None) -> list[str]:
    changed = {j.id for j in jobs if state is None or j.state is state}
    return [i for i in dict.fromkeys(ids) if i in changed]


@router.get("/jobs/{job_id}/parent-results", response_model=ParentResultsOut, responses=READ_ONE_IF)
async def parent_results(job_id: JobIdPath, request: Request, principal: Worker) -> Response:
    """The results of the graph node's parents that succeeded, by node name (``{}`` for a plain job). 409
    (type ``results-too-large``) past the size a node may receive: fail the job for good, as another
    attempt would read the same results."""
    engine = context(request).engine
    job = await engine.get_job(job_id, principal.tenant)
    if job.graph_id is None:
        return json_response({"graph_id": None, "node": None, "results": {}})
    try:
        results = await engine.graphs.parent_results(job)
    except ResultsTooLarge as exc:
        extra = {"size": exc.size, "limit": exc.limit}
        raise ProblemError(409, str(exc), field="results", type_=RESULTS_TOO_LARGE, extra=extra) from exc
    node = (await engine.graphs.node_names([job])).get(job.id)
    return json_response({"graph_id": job.graph_id, "node": node, "results": results})


# -- one job at a time (409 when the lease is lost) ----------------------------------------------------
@router.post("/jobs/{job_id}/heartbeat", response_model=JobHeartbeatOut, responses=WRITE_ONE)
async def job_heartbeat(job_id: JobIdPath, body: JobHeartbeatIn, request: Request, principal: Worker) -> Response:
    """Extend one lease; 409 if it is lost (stop the job, report nothing)."""
    engine = context(request).engine
    job = await engine.get_job(job_id, principal.tenant)
    hb = await engine.transitions.heartbeat_jobs([Lease(job.id, LeaseToken(body.token))], body.lease_seconds)
    if job.id not in hb.held:
        raise _lost(job_id)
    expires = (await engine.get_job(job_id, principal.tenant)).lease_expires_at
    return json_response({"cancel_requested": job.id in hb.cancel_requested, "lease_expires_at": iso(expires)})


@router.post("/jobs/{job_id}/phases", response_model=HeldOut, responses=WRITE_ONE)
async def job_phases(job_id: JobIdPath, body: PhasesIn, request: Request, principal: Worker) -> Response:
    """Store the job's phase records, progress and checkpoints; 409 if the lease is lost."""
    engine = context(request).engine
    await engine.get_job(job_id, principal.tenant)
    if not (await engine.transitions.save_phases([_phase(body, job_id)])).jobs:
        raise _lost(job_id)
    return json_response({"held": [job_id], "lost": []})


@router.post("/jobs/{job_id}/complete", response_model=ReportOut, responses=WRITE_ONE)
async def job_complete(job_id: JobIdPath, body: CompleteIn, request: Request, principal: Worker) -> Response:
    """The attempt succeeded with ``result``; 409 if the lease is lost (the report is refused)."""
    engine = context(request).engine
    job = await engine.get_job(job_id, principal.tenant)
    completion = Completion(job.id, LeaseToken(body.token), body.result, _added(body))
    # Nodes the graph refuses are a 422 naming the field; the job stays running for the worker to report.
    changed = await engine.transitions.complete_jobs([completion], refused="raise")
    if not _applied([job_id], changed.jobs, JobState.SUCCEEDED):
        raise _lost(job_id)
    return json_response({"completed": [job_id], "failed": [], "released": [], "refused": []})


@router.post("/jobs/{job_id}/fail", response_model=ReportOut, responses=WRITE_ONE)
async def job_fail(job_id: JobIdPath, body: FailIn, request: Request, principal: Worker) -> Response:
    """The attempt failed: retried with backoff if ``retryable`` and attempts remain, else dead (or
    cancelled); 409 if the lease is lost."""
    engine = context(request).engine
    job = await engine.get_job(job_id, principal.tenant)
    changed = await engine.transitions.fail_jobs([_failure(engine, job, body)])
    if not _applied([job_id], changed.jobs, None):
        raise _lost(job_id)
    return json_response({"completed": [], "failed": [job_id], "released": [], "refused": []})


@router.post("/jobs/{job_id}/release", response_model=ReportOut, responses=WRITE_ONE)
async def job_release(job_id: JobIdPath, body: ReleaseIn, request: Request, principal: Worker) -> Response:
    """Give the job back (queued, the attempt not spent): the worker is shutting down. 409 if not held."""
    engine = context(request).engine
    job = await engine.get_job(job_id, principal.tenant)
    changed = await engine.transitions.release_jobs([Lease(job.id, LeaseToken(body.token))])
    if not _applied([job_id], changed.jobs, JobState.QUEUED):
        raise _lost(job_id)
    return json_response({"completed": [], "failed": [], "released": [job_id], "refused": []})
