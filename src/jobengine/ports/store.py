"""The Store port: the system of record for jobs and events.

Methods are named after state transitions and take batches. Each mutating method runs in one transaction
that also appends the events of what it changed, and returns the jobs as they now are with those events.
Every change to a running job is fenced by its lease token: a token that no longer matches changes nothing
and is simply absent from the result (never an error), so a stale worker cannot complete a job twice.

Driver errors are turned into :mod:`jobengine.errors` here, at the seam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import (
    Changed,
    Completion,
    Event,
    Failure,
    Heartbeat,
    Inserted,
    Job,
    JobFilter,
    Lease,
    NewJob,
    PhaseUpdate,
    Pruned,
)
from jobengine.core.states import JobState
from jobengine.ports.ids import IdIndex
from jobengine.ports.notifier import Notifier
from jobengine.ports.outbox import OutboxStore
from jobengine.ports.packs import PackStore
from jobengine.ports.workers import WorkerRegistry

if TYPE_CHECKING:
    from jobengine.ports.blobs import BlobStore
    from jobengine.ports.graphs import GraphStore
    from jobengine.ports.leader import Leader
    from jobengine.ports.schedules import SchedulingStore
    from jobengine.ports.webhooks import WebhookStore
    from jobengine.settings import Settings


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store can do beyond the :class:`Store` port, declared by the store and read by its callers
    (instead of probing its class). A feature that needs one it lacks raises ConfigError naming the option."""

    #: Several processes may share the store (false for `database: memory`: its path is private).
    shared: bool
    #: The store's notifier wakes workers in other processes, not only in this one.
    cross_process_notify: bool
    #: Jobs can be inserted in the caller's own open transaction
    #: (:class:`~jobengine.ports.transactional.TransactionalStore`).
    transactional_enqueue: bool = False
    #: Jobs and their outbox rows can be inserted in the caller's own open transaction
    #: (:class:`~jobengine.ports.outbox.TransactionalOutboxStore`).
    transactional_outbox: bool = False
    #: Jobs can carry watermarks (:class:`~jobengine.ports.watermarks.WatermarkStore`).
    watermarks: bool = False
    #: The event log answers reads of settled events only (:class:`~jobengine.ports.eventlog.SettlingEventLog`).
    settled_events: bool = False
    #: Applying pending migrations on a process's first call is safe: the schema is in a file this process
    #: opens, with no deployment step to apply them and no other database user to surprise. The sync facade
    #: (:meth:`jobengine.engine.Engine.enqueue_sync`) then migrates before its first call; elsewhere a
    #: missing table is an error naming ``jobengine migrate``.
    migrates_on_first_use: bool = False


class Store(OutboxStore, PackStore, IdIndex, Protocol):
    """Every backend's store; ``capabilities`` says which optional ports it implements as well."""

    capabilities: Capabilities

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations; return the versions applied. Idempotent."""
        ...

    async def close(self) -> None: ...

    def notifier(self) -> Notifier:
        """The notifier that suits this store (in-process, SQLite data_version, LISTEN/NOTIFY...)."""
        ...

    def finished_notifier(self) -> Notifier:
        """A new notifier whose ``wait`` wakes when jobs reach a terminal state (succeeded, dead, cancelled)
        in any process that shares the store, spuriously at times (SQLite wakes on every commit). Apart from
        :meth:`notifier`, so waiting for outcomes never takes a worker's wake-up; the caller closes it."""
        ...

    def workers(self) -> WorkerRegistry:
        """The registry of live workers (:mod:`jobengine.ports.workers`); the same object every call."""
        ...

    def scheduling(self) -> SchedulingStore:
        """The schedules, runs and failure signatures of this store (:mod:`jobengine.ports.schedules`)."""
        ...

    def graphs(self) -> GraphStore:
        """The graphs of jobs of this store (:mod:`jobengine.ports.graphs`)."""
        ...

    def leader(self, name: str) -> Leader:
        """A Leader for ``name`` among every process of this store (the scheduler uses ``scheduler``)."""
        ...

    def webhook_store(self, settings: Settings) -> WebhookStore:
        """A new webhook store (:mod:`jobengine.ports.webhooks`) over this store's database, its secrets
        sealed as ``settings`` say (:mod:`jobengine.backends.webhooks`); the caller closes it."""
        ...

    def blob_store(self, settings: Settings) -> BlobStore:
        """The blob store for pack content that ``settings`` choose with this store
        (:func:`jobengine.settings.blob_store_kind`); ConfigError when the combination cannot work."""
        ...

    # -- transitions --------------------------------------------------------------------------------
    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        """Insert jobs (``phases[i]`` names the phases of ``jobs[i]``'s task, maybe empty).

        - An idempotency key already used in the tenant returns the existing job (``created`` False) when
          task, queue and payload are equal, else raises ``IdempotencyConflict``; nothing of the batch is kept.
        - ``depends_on`` naming an unknown job raises ``UnknownDependency``; a job whose dependencies all
          succeeded is runnable, one with a dead or cancelled dependency is cancelled at once, else blocked.
          A dependency may be a job earlier in the same batch.
        """
        ...

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
        """Claim up to ``limit`` runnable jobs (state queued / scheduled / failed with run_at <= now) in
        ``priority DESC, run_at, id`` order; each becomes running with a new lease token, attempt + 1.
        Only jobs whose task is in ``tasks`` (None: any; empty: none) and whose tenant is ``tenant`` (None:
        any) are claimed: a worker takes only what it can run, decided in the claim itself."""
        ...

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_until: float, now: float) -> Heartbeat:
        """Extend the leases still held; report which are held and which of those were asked to cancel."""
        ...

    async def save_phases(self, updates: Sequence[PhaseUpdate], now: float) -> Changed:
        """Store phase records / progress of running jobs (fenced). ``Changed.jobs`` are the ones held."""
        ...

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        """running -> succeeded (fenced); dependents whose dependencies all succeeded become runnable. A
        graph's store also queues, in the same transaction, the nodes a failure policy now lets run
        (:func:`jobengine.core.graphs.settle`). ``Completion.nodes`` are not read here: the engine stores
        them with their completion through :meth:`jobengine.ports.graphs.GraphStore.expand`."""
        ...

    async def fail_jobs(self, failures: Sequence[Failure], now: float) -> Changed:
        """running -> failed (retry at ``retry_at``) / dead / cancelled, keeping the error (fenced).
        Dependents of a job that ended dead or cancelled are cancelled, transitively; a graph's store then
        queues again, in the same transaction, the nodes a failure policy lets run."""
        ...

    async def release_jobs(self, leases: Sequence[Lease], now: float) -> Changed:
        """running -> queued without spending an attempt (fenced)."""
        ...

    async def cancel_jobs(self, ids: Sequence[JobId], reason: str, now: float, tenant: str | None = None) -> Changed:
        """Cancel not-yet-running jobs at once (and their dependents); flag running ones (the worker sees
        the flag on its next heartbeat). Terminal and unknown jobs are left out of the result."""
        ...

    async def retry_jobs(self, ids: Sequence[JobId], now: float, tenant: str | None = None) -> Changed:
        """Queue dead / cancelled / failed jobs again now, with a fresh attempt budget."""
        ...

    async def prune_jobs(self, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
        """Terminal jobs finished before ``stale_before`` become stale; stale jobs finished before
        ``delete_before`` are deleted. Never touches a job that is not terminal."""
        ...

    # -- reads --------------------------------------------------------------------------------------
    async def expired_jobs(self, now: float, limit: int) -> list[Job]:
        """Running jobs whose lease expired before ``now`` (for the rescuer)."""
        ...

    async def get_jobs(self, ids: Sequence[JobId], tenant: str | None = None) -> list[Job]: ...

    async def list_jobs(self, filter: JobFilter) -> list[Job]:
        """Newest first."""
        ...

    async def count_jobs(self, tenant: str | None = None, *, finished: bool = True) -> dict[tuple[str, JobState], int]:
        """Job counts by (queue, state). ``finished=False``: only the jobs not finished yet (blocked,
        scheduled, queued, running, failed), read without touching the finished ones, whose number only
        grows."""
        ...

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        """The earliest run_at among runnable jobs of ``queues`` and ``tasks`` (None: any task; the result
        None: nothing runnable)."""
        ...

    async def list_events(
        self, after_id: int, limit: int, job_id: JobId | None = None, tenant: str | None = None
    ) -> list[Event]:
        """Events with id > after_id, oldest first."""
        ...
