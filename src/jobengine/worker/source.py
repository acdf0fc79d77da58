"""What the worker needs from the engine: the transitions, already instrumented (events, bus, notifier).

The engine implements this; the worker never sees a Store, so it cannot bypass the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from jobengine.core.clock import Clock
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed, Completion, Failure, Heartbeat, Job, Json, Lease, PhaseUpdate
from jobengine.ports.notifier import Notifier
from jobengine.ports.workers import WorkerInfo
from jobengine.tasks import TaskRegistry


class WorkerSource(Protocol):
    clock: Clock
    tasks: TaskRegistry

    def notifier(self) -> Notifier: ...

    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker: WorkerId, lease_seconds: float, *, tasks: Sequence[str]
    ) -> list[Job]:
        """Claim jobs of ``queues`` whose task is one of ``tasks`` (the worker's: it claims only what it can
        run)."""
        ...

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> Heartbeat: ...

    async def save_phases(self, updates: Sequence[PhaseUpdate]) -> Changed: ...

    async def complete_jobs(self, completions: Sequence[Completion]) -> Changed: ...

    async def fail_jobs(self, failures: Sequence[Failure]) -> Changed: ...

    async def release_jobs(self, leases: Sequence[Lease]) -> Changed: ...

    async def rescue_jobs(self) -> Changed: ...

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str]) -> float | None: ...

    async def parent_results(self, job: Job) -> dict[str, Json]:
        """The results graph node ``job`` receives from its parents, by node name, read from the store."""
        ...

    async def register_worker(self, info: WorkerInfo) -> WorkerInfo:
        """Enter the worker in the registry of live workers (:mod:`jobengine.ports.workers`)."""
        ...

    async def beat_worker(self, worker: WorkerId) -> bool:
        """Still alive; False: the worker was declared dead (it registers again; its leases are gone)."""
        ...

    async def unregister_worker(self, worker: WorkerId) -> None: ...

    async def rescue_dead_workers(self) -> Changed:
        """Run again the jobs of workers whose process is gone."""
        ...
