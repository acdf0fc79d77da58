"""Job counts by queue and state for what shows them again and again (``/metrics``, the dashboard's live
overview), at a cost that does not grow with the finished jobs a store keeps."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobengine.core.states import UNFINISHED, JobState

if TYPE_CHECKING:
    from jobengine.engine import Engine

log = logging.getLogger("jobengine.engine")

Counts = dict[tuple[str, JobState], int]


@dataclass
class _Last:
    finished: Counts  # the finished states of the last full count
    counted_at: float  # when it ended (the clock's time)
    took: float  # how long it took (seconds)
    refresh: asyncio.Task[Counts] | None = None


class StoreCounts:
    """A tenant's job counts (every tenant's with ``tenant`` None): the unfinished states counted afresh each
    time (from the partial indexes that hold them, cheap however many jobs the store keeps), the finished
    ones from the last full count. A full count reads every job the store keeps: seconds once it keeps
    millions. So while a full count takes ``cheap`` seconds or less, every call runs one; once it takes
    longer, a call that finds it ``max_age`` old starts the next one in the background and answers with the
    last. Usage::

        counts = StoreCounts()
        by_queue_and_state = await counts.counts(engine, "acme")
    """

    def __init__(
        self, *, cheap: float = 0.1, max_age: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._cheap, self._max_age, self._clock = cheap, max_age, clock
        self._last: dict[str | None, _Last] = {}
        self._lock = asyncio.Lock()

    async def counts(self, engine: Engine, tenant: str | None = None) -> Counts:
        async with self._lock:  # concurrent callers wait for one full count instead of each running theirs
            last = self._last.get(tenant)
            if last is None or last.took <= self._cheap:
                return await self._full(engine, tenant)
            stale = self._clock() - last.counted_at >= self._max_age
            if stale and (last.refresh is None or last.refresh.done()):
                last.refresh = asyncio.get_running_loop().create_task(self._full(engine, tenant, quiet=True))
            unfinished = await engine.count_jobs(tenant, finished=False)
            return {**last.finished, **unfinished}

    async def _full(self, engine: Engine, tenant: str | None, *, quiet: bool = False) -> Counts:
        started = time.perf_counter()
        try:
            counts = await engine.count_jobs(tenant)
        except Exception as exc:
            if not quiet:
                raise
            log.warning("counting the finished jobs again failed (%s); the last count stays", exc)
            return {}
        took = time.perf_counter() - started
        finished = {k: n for k, n in counts.items() if k[1] not in UNFINISHED}
        if len(self._last) > 1000:  # tenants come and go; a count is cheap to make again
            self._last.clear()
        self._last[tenant] = _Last(finished, self._clock(), took)
        return counts
