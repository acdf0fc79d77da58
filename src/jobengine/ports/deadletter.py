"""Purging the dead-letter (an optional port beside the Store).

Retention deletes terminal jobs by age; an operator also needs to drop dead jobs now, without waiting for
them to go stale. Deleting is the same as retention's: the row and its outgoing dependency edges go, a
``job.deleted`` event is appended in the same transaction, and edges *to* the job stay (its dependents
were cancelled when it died, and keep their ``depends_on``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from jobengine.core.ids import JobId
from jobengine.core.models import Event


@runtime_checkable
class DeadLetterStore(Protocol):
    async def purge_dead_jobs(
        self,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        """Delete up to ``limit`` jobs in state ``dead`` (of ``tenant``, among ``ids``, in ``queue``: each
        None means any), oldest first; return their ``job.deleted`` events. Other states are never touched."""
        ...
