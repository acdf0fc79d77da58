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
class _Tenant:
    answer: Counts  # the last answer given
    answered_at: float
    finished: Counts  # the finished states of the last full count
    counted_at: float  # when that count ended
    took: float  # how long it took (seconds)
    refresh: asyncio.Task[None] | None = None


class StoreCounts:
    """A tenant's job counts (every tenant's with ``tenant`` None), for callers that ask again and again.

    - ``share``: an answer younger than this many seconds is given again (the open overview streams of a
      dashboard share one count per refresh); 0 counts at each call.
    - The unfinished states are counted afresh (from the partial indexes that hold them: cheap however many
      jobs the store keeps). The finished ones need a full count, which reads every job the store keeps:
      seconds once it keeps millions. While a full count takes ``cheap`` seconds or less, each answer runs
      one; once it takes longer, an answer takes the finished states from the last one and, when that is
      ``max_age`` old, starts the next one in the background.

    Usage::

        counts = StoreCounts(engine)
        by_queue_and_state = await counts.counts("acme")
    """

    def __init__(
        self,
        engine: Engine,
        *,
        share: float = 0.0,
        cheap: float = 0.1,
        max_age: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._share, self._cheap, self._max_age, self._clock = share, cheap, max_age, clock
        self._tenants: dict[str | None, _Tenant] = {}
        self._lock = asyncio.Lock()

    async def counts(self, tenant: str | None = None) -> Counts:
        async with self._lock:  # concurrent callers wait for one count instead of each running theirs
            last = self._tenants.get(tenant)
            now = self._clock()
            if last is not None and now - last.answered_at < self._share:
                return last.answer
            if last is None or last.took <= self._cheap:
                return await self._full(tenant)
            if now - last.counted_at >= self._max_age and (last.refresh is None or last.refresh.done()):
                last.refresh = asyncio.get_running_loop().create_task(self._refresh(tenant))
            unfinished = await self._engine.count_jobs(tenant, finished=False)
            last.answer, last.answered_at = {**last.finished, **unfinished}, now
            return last.answer

    async def _full(self, tenant: str | None) -> Counts:
        started = time.perf_counter()
        counts = await self._engine.count_jobs(tenant)
        took = time.perf_counter() - started
        finished = {k: n for k, n in counts.items() if k[1] not in UNFINISHED}
        if len(self._tenants) > 1000:  # tenants come and go; a count is cheap to make again
            self._tenants.clear()
        now = self._clock()
        self._tenants[tenant] = _Tenant(counts, now, finished, now, took)
        return counts

    async def _refresh(self, tenant: str | None) -> None:
        try:
            await self._full(tenant)
        except Exception as exc:
            log.warning("counting the finished jobs again failed (%s); the last count stays", exc)
