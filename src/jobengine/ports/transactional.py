"""Transactional enqueue (an optional port): write jobs inside the caller's own database transaction.

A store that offers it takes the caller's connection (for PostgreSQL a ``psycopg.AsyncConnection``, typed
``object`` here because the port names no driver), writes the jobs with the application's data, and leaves
commit and rollback to the caller: rolled back, the jobs never existed; committed, they run (workers are
woken by the store's NOTIFY, delivered at commit). A store that offers it says so in
``capabilities.transactional_enqueue``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from jobengine.core.ids import JobId
from jobengine.core.models import Inserted, NewJob
from jobengine.ports.watermarks import Watermark


@runtime_checkable
class TransactionalStore(Protocol):
    async def insert_jobs_in(
        self,
        connection: object,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        """:meth:`Store.insert_jobs` on ``connection``, inside whatever transaction it has open. Nothing is
        committed here. Raises the same errors as ``insert_jobs``; after one, the caller's transaction is
        still usable (the store's own statements run in a savepoint)."""
        ...
