"""What the worker needs from the engine: the transitions, already instrumented (events, bus, notifier).

The engine implements this; the worker never sees a Store, so it cannot bypass the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from jobengine.core.clock import Clock
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed, Completion, Failure, Heartbeat, Job, Lease, PhaseUpdate
from jobengine.ports.notifier import Notifier
from jobengine.tasks import TaskRegistry


class WorkerSource(Protocol):
    clock: Clock
    tasks: TaskRegistry

    def notifier(self) -> Notifier: ...

    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker: WorkerId, lease_seconds: float
    ) -> list[Job]: ...

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> Heartbeat: ...

    async def save_phases(self, updates: Sequence[PhaseUpdate]) -> Changed: ...

    async def complete_jobs(self, completions: Sequence[Completion]) -> Changed: ...

    async def fail_jobs(self, failures: Sequence[Failure]) -> Changed: ...

    async def release_jobs(self, leases: Sequence[Lease]) -> Changed: ...

    async def rescue_jobs(self) -> Changed: ...

    async def next_run_at(self, queues: Sequence[str]) -> float | None: ...
