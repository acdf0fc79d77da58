"""Rows of the ``workers`` table as both SQL backends read them. The list columns (queues, tasks, packs)
arrive decoded from PostgreSQL's jsonb and as codec-encoded text from SQLite: ``lists`` turns one such value
into a sequence of names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from jobengine.core.ids import WorkerId
from jobengine.ports.workers import WorkerInfo

WORKER_COLUMNS: Final = (
    "id, kind, tenant, host, pid, version, queues, tasks, packs, concurrency, lock_key, started_at, last_seen, "
    "expires_at"
)


def worker_from_row(r: Sequence[Any], lists: Callable[[Any], Sequence[str]] = tuple) -> WorkerInfo:
    """A row of WORKER_COLUMNS, optionally followed by the count of jobs the worker holds."""
    return WorkerInfo(
        id=WorkerId(r[0]), kind=r[1], tenant=r[2], host=r[3], pid=int(r[4]), version=r[5], queues=tuple(lists(r[6])),
        tasks=tuple(lists(r[7])), packs=tuple(lists(r[8])), concurrency=int(r[9]),
        lock_key=None if r[10] is None else int(r[10]), started_at=float(r[11]), last_seen=float(r[12]),
        expires_at=float(r[13]), in_flight=int(r[14]) if len(r) > 14 else 0,
    )  # fmt: skip
