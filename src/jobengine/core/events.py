"""Event types and how a job's transition becomes an event. Stores append them in the transaction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from jobengine.core.models import Job, Json, NewEvent

ENQUEUED: Final = "job.enqueued"
UNBLOCKED: Final = "job.unblocked"
STARTED: Final = "job.started"
PHASE: Final = "job.phase"
SUCCEEDED: Final = "job.succeeded"
FAILED: Final = "job.failed"
DEAD: Final = "job.dead"
CANCELLED: Final = "job.cancelled"
CANCEL_REQUESTED: Final = "job.cancel_requested"
RELEASED: Final = "job.released"
RETRIED: Final = "job.retried"
STALE: Final = "job.stale"
DELETED: Final = "job.deleted"

ALL: Final = (
    ENQUEUED, UNBLOCKED, STARTED, PHASE, SUCCEEDED, FAILED, DEAD, CANCELLED,
    CANCEL_REQUESTED, RELEASED, RETRIED, STALE, DELETED,
)  # fmt: skip


def job_event(type_: str, job: Job, data: Mapping[str, Json] | None = None) -> NewEvent:
    """The event for ``job`` having just made a transition; ``data`` carries what the type needs."""
    body: dict[str, Json] = {"state": job.state.value, "attempt": job.attempt}
    if data:
        body.update(data)
    return NewEvent(type=type_, tenant=job.tenant, job_id=job.id, queue=job.queue, task=job.task, data=body)
