"""Job counts by queue and state for what shows them again and again (``/metrics``, the queue listings of
the API, the command line and the dashboard, the dashboard's live overview), at a cost that does not grow
with the finished jobs a store keeps."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from jobengine.core.states import UNFINISHED, JobState
from jobengine.engine.ahead import ReadAhead

log = logging.getLogger("jobengine.engine")

Counts = dict[tuple[str, JobState], int]


class CountSource(Protocol):
    """What counts jobs: a store, or the engine (``count_jobs`` of either)."""

    async def count_jobs(self, tenant: str | None = None, *, finished: bool = True) -> Counts: ...


@dataclass
class _Tenant:
    answer: Counts  # the last answer given
    answered_at: float
    finished: Counts  # the finished states of the last full count
    counted_at: float  # when that count ended
    took: float  # how long it took (seconds)
    ahead: ReadAhead = field(default_factory=lambda: ReadAhead("job-counts"))  # the next full count


class StoreCounts:
    """A tenant's job counts (every tenant's with ``tenant`` None), for callers that ask again and again.

    - ``share`` (of a call): an answer younger than this many seconds is given again (the open overview
      streams of a dashboard share one count per refresh); 0, the default, counts at each call.
    - The unfinished states are counted afresh (from the partial indexes that hold them: cheap however many
      jobs the store keeps). The finished ones need a full count, which reads every job the store keeps:
      seconds once it keeps millions. While a full count takes ``cheap`` seconds or less, or finds fewer
      than ``min_finished`` finished jobs, each answer runs one (a small store's counts are exact even when
      a busy machine slows a count down); past both, an answer takes the finished states from the last one
      and, when that is ``max_age`` old, starts the next one in the background.

    Usage::

        counts = StoreCounts(engine)
        by_queue_and_state = await counts.counts("acme")

    The engine keeps one, ``engine.queues.counts``, for everything that shows counts.
    """

    def __init__(
        self,
        source: CountSource,
        *,
        cheap: float = 0.1,
        min_finished: int = 100_000,
        max_age: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._cheap, self._max_age, self._clock = cheap, max_age, clock
        self._min_finished = min_finished
        self._tenants: dict[str | None, _Tenant] = {}
        # One lock per event loop: an engine's services are called from more than one (a sync caller's).
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    async def counts(self, tenant: str | None = None, *, share: float = 0.0) -> Counts:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        async with lock:  # concurrent callers wait for one count instead of each running theirs
            last = self._tenants.get(tenant)
            now = self._clock()
            if last is not None and now - last.answered_at < share:
                return last.answer
            if last is None or last.took <= self._cheap or sum(last.finished.values()) < self._min_finished:
                return await self._full(tenant)
            if now - last.counted_at >= self._max_age:
                last.ahead.start(lambda: self._recount(tenant))
            unfinished = await self._source.count_jobs(tenant, finished=False)
            last.answer, last.answered_at = {**last.finished, **unfinished}, now
            return last.answer

    async def _full(self, tenant: str | None) -> Counts:
        started = time.perf_counter()
        counts = await self._source.count_jobs(tenant)
        took = time.perf_counter() - started
        finished = {k: n for k, n in counts.items() if k[1] not in UNFINISHED}
        if len(self._tenants) > 1000:  # tenants come and go; a count is cheap to make again
            self._tenants.clear()
        now = self._clock()
        self._tenants[tenant] = _Tenant(counts, now, finished, now, took)
        return counts

    async def _recount(self, tenant: str | None) -> None:
        """The next full count, in the background. A failed one leaves the last in place and is tried again at
        the next call; it is logged as a warning, since a store whose full count outgrew a statement timeout
        would otherwise report old counts unseen."""
        try:
            await self._full(tenant)
        except Exception as exc:
            log.warning("counting the finished jobs again failed (%s); the last count stays", exc)
