"""The API's JSON (:mod:`jobengine.serialize`) back into domain values, for the remote worker runtime."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobengine.core.ids import GraphId, JobId, LeaseToken, RunId, ScheduleId, WorkerId
from jobengine.core.models import AttemptError, Job, Phase, PhaseState
from jobengine.core.states import JobState


def seconds(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def phase_from_json(d: Mapping[str, Any]) -> Phase:
    return Phase(
        name=d["name"], state=PhaseState(d["state"]), progress=float(d.get("progress") or 0.0),
        result=d.get("result"), checkpoint=d.get("checkpoint"), message=d.get("message"),
        started_at=seconds(d.get("started_at")), finished_at=seconds(d.get("finished_at")),
    )  # fmt: skip


def error_from_json(d: Mapping[str, Any]) -> AttemptError:
    return AttemptError(int(d["attempt"]), seconds(d.get("at")) or 0.0, d["type"], d["message"], d.get("traceback"),
                        d.get("worker"))  # fmt: skip


def job_from_json(d: Mapping[str, Any], lease: Mapping[str, Any] | None = None) -> Job:
    """A Job from ``job_to_json`` output; ``lease`` (a claim's ``{token, expires_at}``) adds the lease."""
    held = d.get("lease") or {}
    return Job(
        id=JobId(d["id"]), tenant=d["tenant"], queue=d["queue"], task=d["task"], payload=d.get("payload"),
        priority=int(d["priority"]), run_at=seconds(d["run_at"]) or 0.0, state=JobState(d["state"]),
        attempt=int(d["attempt"]), max_attempts=int(d["max_attempts"]),
        created_at=seconds(d["created_at"]) or 0.0, updated_at=seconds(d["updated_at"]) or 0.0,
        idempotency_key=d.get("idempotency_key"), depends_on=tuple(JobId(x) for x in d.get("depends_on") or ()),
        timeout=d.get("timeout"),
        lease_worker=WorkerId(held["worker"]) if held.get("worker") else None,
        lease_token=LeaseToken(lease["token"]) if lease else None,
        lease_expires_at=seconds(lease.get("expires_at")) if lease else seconds(held.get("expires_at")),
        cancel_requested=bool(d.get("cancel_requested")), reason=d.get("reason"),
        phases=tuple(phase_from_json(p) for p in d.get("phases") or ()), progress=float(d.get("progress") or 0.0),
        result=d.get("result"), errors=tuple(error_from_json(e) for e in d.get("errors") or ()),
        outcome=JobState(d["outcome"]) if d.get("outcome") else None,
        started_at=seconds(d.get("started_at")), finished_at=seconds(d.get("finished_at")),
        run_id=RunId(d["run_id"]) if d.get("run_id") else None,
        schedule_id=ScheduleId(d["schedule_id"]) if d.get("schedule_id") else None,
        graph_id=GraphId(d["graph_id"]) if d.get("graph_id") else None,
        has_dependents=bool(d.get("has_dependents")), trace=d.get("trace"),
    )  # fmt: skip
