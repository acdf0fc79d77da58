"""The one JSON shape of jobs and events that every edge prints or serves (CLI ``--json``, the HTTP API).

The shape is a public contract: add keys, never rename or remove them. Times are ISO 8601 strings in UTC
with milliseconds (``2024-05-01T12:00:00.000+00:00``) or null; ``depends_on`` is a list of ids. The lease
token is never exposed: it is the fencing secret of the worker that holds the job. Usage::

    print(json.dumps(job_to_json(await engine.get_job(job_id))))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobengine.core.clock import iso

if TYPE_CHECKING:  # names for the signatures only: a job's shape must not load the scheduler's modules
    from jobengine.core.graphs import GraphStatus
    from jobengine.core.models import AttemptError, Event, Job, NewJob, Phase
    from jobengine.core.runs import Run, Segment
    from jobengine.core.schedules import Schedule, Template
    from jobengine.core.selection import BulkResult
    from jobengine.core.signatures import Signature
    from jobengine.ports.workers import WorkerInfo
    from jobengine.scheduler.planning import Simulation

JsonObject = dict[str, Any]


def int_if_whole(value: float | None) -> float | None:
    """An integral float as its int (``1.0`` as ``1``), other values as they are: the canonical JSON writes
    them alike, and the HTTP API's encoder takes the int without falling back to the slower canonical
    writer (``jobengine.http.responses``)."""
    if type(value) is float and value.is_integer() and -(2**53) < value < 2**53:
        return int(value)
    return value


def phase_to_json(phase: Phase) -> JsonObject:
    return {
        "name": phase.name,
        "state": phase.state.value,
        "progress": int_if_whole(phase.progress),
        "message": phase.message,
        "result": phase.result,
        "checkpoint": phase.checkpoint,
        "started_at": iso(phase.started_at),
        "finished_at": iso(phase.finished_at),
    }


def error_to_json(error: AttemptError) -> JsonObject:
    return {**error.to_json(), "at": iso(error.at)}


def job_to_json(job: Job, waiting_for: str | None = None) -> JsonObject:
    """Every public field of ``job`` as JSON-ready values (see the module docstring for the rules).
    ``waiting_for``: why a runnable job is not running (``Fleet.waiting_reasons``), when that is known."""
    lease = None
    if job.lease_worker is not None:
        lease = {"worker": job.lease_worker, "expires_at": iso(job.lease_expires_at)}
    return {
        "id": job.id,
        "tenant": job.tenant,
        "queue": job.queue,
        "task": job.task,
        "state": job.state.value,
        "outcome": job.outcome.value if job.outcome is not None else None,
        "payload": job.payload,
        "priority": job.priority,
        "run_at": iso(job.run_at),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "idempotency_key": job.idempotency_key,
        "depends_on": list(job.depends_on),
        "timeout": int_if_whole(job.timeout),
        "lease": lease,
        "cancel_requested": job.cancel_requested,
        "reason": job.reason,
        "progress": int_if_whole(job.progress),
        "phases": [phase_to_json(p) for p in job.phases],
        "result": job.result,
        "errors": [error_to_json(e) for e in job.errors],
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "run_id": job.run_id,
        "schedule_id": job.schedule_id,
        "graph_id": job.graph_id,
        "trace": job.trace,
        "has_dependents": job.has_dependents,
        "waiting_for": waiting_for,
    }


def event_to_json(event: Event) -> JsonObject:
    """An event as JSON: ``data`` is passed through as the store recorded it."""
    return {
        "id": event.id,
        "at": iso(event.at),
        "type": event.type,
        "tenant": event.tenant,
        "job_id": event.job_id,
        "queue": event.queue,
        "task": event.task,
        "data": dict(event.data),
    }


# -- the scheduler: schedules, runs, segments, signatures, simulations --------------------------------------
def template_to_json(template: Template) -> JsonObject:
    return template.to_json()


def schedule_to_json(schedule: Schedule) -> JsonObject:
    """A schedule: its spec (``every`` and ``jitter`` in seconds) and where it stands."""
    spec = schedule.spec
    return {
        "id": schedule.id,
        "tenant": spec.tenant,
        "name": spec.name,
        "cron": spec.cron,
        "every": spec.every,
        "timezone": spec.timezone,
        "template": template_to_json(spec.template),
        "overlap": spec.overlap.value,
        "misfire": spec.misfire.value,
        "catch_up": spec.catch_up,
        "jitter": spec.jitter,
        "enabled": spec.enabled,
        "version": schedule.version,
        "next_fire_at": iso(schedule.next_fire_at),
        "last_tick": iso(schedule.cursor),
        "created_at": iso(schedule.created_at),
        "updated_at": iso(schedule.updated_at),
        "created_by": schedule.created_by,
        "updated_by": schedule.updated_by,
    }


def graph_to_json(graph: GraphStatus) -> JsonObject:
    """A graph (``GraphOut``): its state and progress; its nodes with their jobs when it was read with them."""
    return {
        "id": graph.id,
        "tenant": graph.tenant,
        "name": graph.name,
        "state": graph.state.value,
        "total": graph.total,
        "done": graph.done,
        "progress": int_if_whole(graph.progress),
        "counts": dict(graph.counts),
        "created_at": iso(graph.created_at),
        "updated_at": iso(graph.updated_at),
        "started_at": iso(graph.started_at),
        "completed_at": iso(graph.completed_at),
        "nodes": [
            {"name": n.name, "policy": n.policy.value, "parents": list(n.parents), "job": job_to_json(n.job)}
            for n in graph.nodes
        ]
        if graph.nodes
        else None,
    }


def run_to_json(run: Run, *, with_trigger_data: bool = False) -> JsonObject:
    """``with_trigger_data``: add ``trigger_data`` (answers about one run; lists leave it out, as stores
    return it only with one run)."""
    out: JsonObject = {
        "id": run.id,
        "schedule_id": run.schedule_id,
        "tenant": run.tenant,
        "state": run.state.value,
        "trigger": run.trigger.value,
        "tick": iso(run.tick),
        "reason": run.reason,
        "actor": run.actor,
        "parent_id": run.parent_id,
        "no_work": run.no_work,
        "items": run.items,
        "summary": run.summary.to_json(),
        "fired_by": run.fired_by,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "mode": run.mode,
    }
    if with_trigger_data:
        out["trigger_data"] = run.trigger_data
    return out


def segment_to_json(segment: Segment) -> JsonObject:
    return {
        "run_id": segment.run_id,
        "job_id": segment.job_id,
        "segment": segment.index,
        "items": segment.items,
        "outcome": segment.outcome.value if segment.outcome is not None else None,
        "duration": segment.duration,
    }


def signature_to_json(s: Signature) -> JsonObject:
    return {
        "tenant": s.tenant,
        "key": s.key,
        "error_type": s.error_type,
        "message": s.message,
        "frames": list(s.frames),
        "task": s.task,
        "occurrences": s.occurrences,
        "first_seen": iso(s.first_seen),
        "last_seen": iso(s.last_seen),
        "sample_job_ids": list(s.sample_job_ids),
        "status": s.status.value,
        "non_retryable": s.non_retryable,
        "updated_at": iso(s.updated_at),
    }


def new_job_to_json(job: NewJob) -> JsonObject:
    """A job that would be created (a simulation): the request, not a stored job."""
    return {
        "task": job.task,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "tenant": job.tenant,
        "run_at": iso(job.run_at),
        "payload": job.payload,
    }


def simulation_to_json(simulation: Simulation) -> JsonObject:
    return {
        "fire_times": [iso(t) for t in simulation.fire_times],
        "runs": [
            {
                "tick": iso(r.tick),
                "no_work": r.no_work,
                "error": r.error,
                "items": list(r.items),
                "jobs": [new_job_to_json(j) for j in r.jobs],
            }
            for r in simulation.runs
        ],
    }


def worker_to_json(worker: WorkerInfo, *, in_flight: bool = True) -> JsonObject:
    """A live worker as the registry records it; ``in_flight`` False leaves out how many jobs it holds
    (they may be other tenants')."""
    return {
        "id": worker.id,
        "kind": worker.kind,
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "queues": list(worker.queues),
        "tasks": list(worker.tasks),
        "packs": list(worker.packs),
        "concurrency": worker.concurrency,
        "started_at": iso(worker.started_at),
        "last_seen": iso(worker.last_seen),
        "in_flight": worker.in_flight if in_flight else None,
    }


def bulk_to_json(result: BulkResult) -> JsonObject:
    """A bulk action's report, as the HTTP API answers it and ``jobs <action> --json`` prints it."""
    return {
        "action": result.action.value,
        "matched": result.matched,
        "changed": len(result.changed),
        "changed_ids": list(result.changed),
        "refused": [{"id": i, "reason": why} for i, why in result.refused],
        "refused_count": result.refused_count,
        "more": result.more,
    }
