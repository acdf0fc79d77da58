"""Throughput and failures over time, for the overview's charts.

The event log is the one source: a :class:`Recorder` reads the events appended since its last
read (``engine.event_log.read_settled``, every tenant, oldest first, never past an id that may still commit)
whenever a page or stream asks for the series, and counts them per tenant in one-minute buckets, keeping
the last ``BUCKETS``. No background task, so nothing to start or stop. On first use it reads back at most
``BACKFILL`` events, so a fresh process shows the recent past too; if more than ``MAX_READ`` events arrived
since the last read, it skips ahead to the newest (the chart then shows a gap instead of a page waiting on
a long read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobengine.core import events as ev
from jobengine.engine import Engine

BUCKET_SECONDS = 60
BUCKETS = 60
BACKFILL = 5_000
MAX_READ = 20_000
_PAGE = 1_000

#: Event type -> series it counts in.
_SERIES = {ev.SUCCEEDED: "succeeded", ev.FAILED: "failed", ev.DEAD: "failed", ev.ENQUEUED: "enqueued"}
SERIES = ("enqueued", "succeeded", "failed")


@dataclass
class _Tenant:
    buckets: dict[int, dict[str, int]] = field(default_factory=dict)


class Recorder:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        self._cursor: int | None = None
        self._tenants: dict[str, _Tenant] = {}
        self._lock = asyncio.Lock()

    async def pull(self) -> None:
        """Count the events appended since the last pull."""
        async with self._lock:
            newest = await self._engine.event_log.newest_id()
            if self._cursor is None:
                self._cursor = max(0, newest - BACKFILL)
            if newest - self._cursor > MAX_READ:
                self._cursor = newest - _PAGE
            while self._cursor < newest:
                # Cut at the settled bound (PostgreSQL): an event that commits after a later id is counted
                # by a later pull instead of being skipped.
                read = await self._engine.event_log.read_settled(self._cursor, _PAGE)
                for event in read.events:
                    name = _SERIES.get(event.type)
                    if name is not None:
                        bucket = int(event.at // BUCKET_SECONDS)
                        tenant = self._tenants.setdefault(event.tenant, _Tenant())
                        counts = tenant.buckets.setdefault(bucket, dict.fromkeys(SERIES, 0))
                        counts[name] += 1
                self._cursor = max(self._cursor, read.cursor)
                if read.complete:
                    break
            self._trim()

    def _trim(self) -> None:
        oldest = int(self._clock() // BUCKET_SECONDS) - BUCKETS
        for tenant in self._tenants.values():
            for bucket in [b for b in tenant.buckets if b <= oldest]:
                del tenant.buckets[bucket]

    def series(self, tenant: str) -> dict[str, list[float]]:
        """``{"t": [bucket start, ...], "enqueued": [...], "succeeded": [...], "failed": [...]}``: the last
        ``BUCKETS`` minutes of ``tenant``, oldest first, zeros where nothing happened."""
        now_bucket = int(self._clock() // BUCKET_SECONDS)
        buckets = self._tenants.get(tenant, _Tenant()).buckets
        keys = range(now_bucket - BUCKETS + 1, now_bucket + 1)
        out: dict[str, list[float]] = {"t": [float(b * BUCKET_SECONDS) for b in keys]}
        for name in SERIES:
            out[name] = [float(buckets.get(b, {}).get(name, 0)) for b in keys]
        return out
