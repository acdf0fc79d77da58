"""The store side of broker delivery (part of every Store): the outbox, and claims by id.

With a broker transport (Redis, NATS) a job must reach the broker exactly when it exists in the store, and a
message must never start a job twice. So:

- :meth:`OutboxStore.insert_jobs_outboxed` writes the jobs *and* one outbox row per job that is ready to
  run, in one transaction: a job is never stored without its message being owed, and a message is never
  owed for a job that was rolled back. The outbox relay (``jobengine.delivery.relay``) leases due rows with
  :meth:`claim_outbox`, publishes them and deletes them with :meth:`delete_outbox`. A crash between publish
  and delete publishes the row again after its lease; the broker's de-duplication (the key is the job id)
  usually swallows the copy, and if not, the claim below makes it harmless.
- :meth:`claim_jobs` is ``fetch_jobs`` restricted to the jobs the broker delivered: each one that is
  runnable now becomes running under a new lease token (attempt + 1, a ``job.started`` event); anything
  else (running elsewhere, finished, cancelled, not due yet, unknown) is simply absent from the result.
  A duplicate delivery therefore claims nothing, and every later change stays fenced by the lease token.

Every store implements it (tables: migration ``0004_outbox``). :class:`TransactionalOutboxStore` is optional:
a store that has it says so in ``capabilities.transactional_outbox``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import Changed, Inserted, Job, NewJob
from jobengine.core.states import JobState
from jobengine.ports.watermarks import Watermark

#: The job states that get an outbox row when inserted: ready now, or at their run_at.
OUTBOXED_STATES = (JobState.QUEUED, JobState.SCHEDULED)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A message owed to the broker: publish a message for ``job_id`` once ``available_at`` has passed."""

    id: int
    job_id: JobId
    queue: str
    available_at: float
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outboxed:
    """What :meth:`OutboxStore.insert_jobs_outboxed` did: the insert, and the outbox rows it wrote (the
    enqueuing process may publish those at once, without claiming them: see ``jobengine.delivery.relay``)."""

    inserted: Inserted
    rows: list[OutboxRow]


@runtime_checkable
class OutboxStore(Protocol):
    async def insert_jobs_outboxed(
        self,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        hold: float = 0.0,
    ) -> Outboxed:
        """:meth:`Store.insert_jobs`, plus in the same transaction one outbox row for every job it created in
        state queued or scheduled (``available_at`` = its run_at; ``headers`` = what its message carries:
        run id, schedule id). Jobs that already existed (idempotency key), blocked jobs and jobs born
        cancelled get none. ``hold``: the rows due now are born held for that many seconds by the caller, whose
        relay publishes them itself (other relays leave them alone meanwhile). ``watermarks`` only where the store
        keeps them (else ConfigError)."""
        ...

    async def claim_outbox(self, now: float, limit: int, lease_seconds: float) -> list[OutboxRow]:
        """Up to ``limit`` rows with ``available_at <= now`` that no other relay holds, oldest first, each
        held until ``now + lease_seconds`` (then another relay may take it)."""
        ...

    async def delete_outbox(self, ids: Sequence[int]) -> None:
        """The rows were published: forget them (unknown ids are ignored)."""
        ...

    async def outbox_due(self, now: float) -> tuple[bool, float | None]:
        """(whether a row is due now and not held, the earliest ``available_at`` of the rows not yet due).
        A read: the relay asks it on every wake-up and claims (a write) only when something is due."""
        ...

    async def claim_jobs(
        self,
        ids: Sequence[JobId],
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
    ) -> Changed:
        """Claim exactly the jobs of ``ids`` that are runnable now (queued / scheduled / failed with
        ``run_at <= now``) and whose task is in ``tasks`` (None: any), in ``priority DESC, run_at, id`` order:
        each becomes running with a new lease token and attempt + 1, with a ``job.started`` event. Other ids
        are absent from the result (never an error)."""
        ...

    async def overdue_jobs(self, before: float, limit: int, after: tuple[float, str] | None = None) -> list[Job]:
        """Runnable jobs with ``run_at < before``, in ``run_at, id`` order, starting past ``after`` (the
        ``(run_at, id)`` of the last job of the page before): jobs that should have run long ago, for the
        relay's sweep (which publishes them again in case their message was lost)."""
        ...


@runtime_checkable
class TransactionalOutboxStore(Protocol):
    async def insert_jobs_outboxed_in(
        self,
        connection: object,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Outboxed:
        """:meth:`OutboxStore.insert_jobs_outboxed` inside the caller's open transaction on ``connection``
        (see ``ports/transactional.py``): committed, the jobs and their messages exist; rolled back, neither."""
        ...
