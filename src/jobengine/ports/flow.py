"""Flow control in the store (an optional port beside the Store, like ``ports/queues.py``).

- ``list_flow_limits`` / ``set_flow_limits`` / ``delete_flow_limits``: the queues' :class:`FlowLimits`
  (table ``flow_limits``, migration 0007), shared by every process.
- :class:`FlowHooks`: the engine's flow control (``engine.flow``) as the worker's sources use it: the job
  transitions and the brokered source claim through it and tell it what finished.
- ``claim_limited``: :meth:`Store.fetch_jobs` for one queue under a :class:`ClaimRule`. The backend reads
  the running jobs of the queue (per key), the runnable candidates and the token buckets (table
  ``flow_buckets``), lets :func:`jobengine.core.flow.select.select` choose, starts those jobs and writes back the
  buckets it took from, **in one transaction serialised per queue** (SQLite: the write lock;
  PostgreSQL: a transaction-level advisory lock on the queue). So concurrent claims of
  any number of processes never pass a concurrency limit or take a token twice. Same order, lease and
  ``job.started`` events as ``fetch_jobs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from jobengine.core.flow.limits import FlowLimits
from jobengine.core.flow.select import ClaimRule
from jobengine.core.ids import WorkerId
from jobengine.core.models import Changed, Job, NewJob


@dataclass(frozen=True, slots=True)
class FlowCounts:
    depth: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class FlowStore(Protocol):
    async def list_flow_limits(self) -> list[FlowLimits]:
        """Every queue's limits, by queue name."""
        ...

    async def set_flow_limits(self, limits: FlowLimits) -> None:
        """Insert or replace the limits of ``limits.queue``."""
        ...

    async def delete_flow_limits(self, queue: str) -> None:
        """Remove the queue's limits (and nothing else; its buckets are forgotten when unused)."""
        ...

    async def flow_counts(self) -> FlowCounts:
        """Runnable and running jobs per queue, every tenant (the partial indexes of runnable and running
        jobs; queues with none may be absent)."""
        ...

    async def claim_limited(
        self, rule: ClaimRule, limit: int, worker: WorkerId, lease_seconds: float, now: float
    ) -> Changed:
        """Start up to ``limit`` runnable jobs of ``rule.queue`` that the rule allows (see the module)."""
        ...


class FlowHooks(Protocol):
    """Flow control as the worker's sources see it: which queues are claimed under which rule, when a
    rate-limited queue has its next token, and what it learns from finished attempts."""

    async def claim_plan(self, queues: Sequence[str], limit: int) -> list[tuple[list[str], int, ClaimRule | None]]:
        """Paused queues left out; each limited queue its own claim under its rule; the rest together."""
        ...

    async def claim_limited(
        self,
        rule: ClaimRule,
        n: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed: ...

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None) -> float | None: ...

    def token_at(self, queue: str, rate: float, now: float) -> float: ...

    def observe(self, jobs: Sequence[Job]) -> None:
        """Finished attempts: the scale window and the adaptive limiters learn them."""
        ...

    async def admit(self, jobs: Sequence[NewJob]) -> None:
        """Raise QueueFull / Overloaded before ``jobs`` are written; record their arrival."""
        ...
