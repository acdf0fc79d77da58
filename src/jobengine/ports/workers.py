"""The worker registry: which worker processes are alive, and what each of them can run.

A worker registers when it starts and removes its row when it stops. While it lives it holds a *liveness
token* that the operating system or the database ends together with its process, so a worker that dies is
known to be dead at once instead of after its jobs' leases expire:

- PostgreSQL: a session-level advisory lock on ``lock_key``, held by a connection of the worker's process;
  the session ends with the process (or its connection), and the lock with it.
- SQLite: an exclusive ``flock`` on a file beside the database, named after ``lock_key``; the kernel
  releases it when the process dies.
- A worker without a liveness token (``lock_key`` None: a remote worker over HTTP) is dead once
  ``expires_at`` has passed without a beat.

:meth:`WorkerRegistry.dead` names the registered workers whose liveness is gone; the engine fails the
attempts of the jobs they held (fenced by lease token, so concurrent rescuers count each once) and then
:meth:`WorkerRegistry.remove` forgets them. A remote worker's jobs keep their leases (its heartbeats are
its only sign of life): an expired remote row is only forgotten. A worker alive but stuck keeps its token:
its jobs wait for their leases, as before. A worker that finds its row gone (:meth:`WorkerRegistry.beat`
answers False) was declared dead: its leases are gone too, and it registers again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from jobengine.core.ids import WorkerId
from jobengine.core.models import Job


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One registered worker. ``kind``: ``local`` (a process on the store) or ``remote`` (over HTTP).
    ``tenant``: the tenant whose jobs it may claim (None: every tenant). ``in_flight``: jobs it holds,
    filled in by reads (the registry row does not keep it)."""

    id: WorkerId
    kind: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    tasks: tuple[str, ...]
    packs: tuple[str, ...] = ()
    concurrency: int = 0
    tenant: str | None = None
    lock_key: int | None = None
    started_at: float = 0.0
    last_seen: float = 0.0
    expires_at: float = 0.0
    in_flight: int = 0

    def seen(self, now: float, expires_at: float) -> WorkerInfo:
        return replace(self, last_seen=now, expires_at=expires_at)


class WorkerRegistry(Protocol):
    async def register(self, info: WorkerInfo) -> None:
        """Take ``info.lock_key``'s liveness token (when it has one) and insert or replace the row."""
        ...

    async def beat(self, worker: WorkerId, now: float, expires_at: float) -> bool:
        """Record that ``worker`` is alive until ``expires_at``. False: it is not registered (it was declared
        dead, or never registered)."""
        ...

    async def unregister(self, worker: WorkerId) -> None:
        """Remove the row and give up the liveness token (a worker that stops)."""
        ...

    async def live(self, now: float) -> list[WorkerInfo]:
        """Registered workers not past ``expires_at``, by start time, with ``in_flight`` filled in."""
        ...

    async def dead(self, now: float) -> list[WorkerInfo]:
        """Registered workers whose liveness token is free (their process is gone) or, without one, whose
        ``expires_at`` passed. Never one whose token is held."""
        ...

    async def held_jobs(self, workers: Sequence[WorkerId], limit: int) -> list[Job]:
        """Running jobs leased to ``workers``."""
        ...

    async def remove(self, workers: Sequence[WorkerId]) -> None:
        """Forget dead workers' rows (after their jobs were rescued)."""
        ...

    async def close(self) -> None:
        """Give up every liveness token this registry holds (the process stops)."""
        ...
