"""The event log as its followers read it (``engine.event_log``): the live feed, reads cut at the settled
bound, the newest id, and pruning by age."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobengine.bus import EventBus
from jobengine.core.clock import Clock
from jobengine.core.ids import JobId
from jobengine.core.models import Event
from jobengine.ports.eventlog import EventLogStore, EventPruneStore, SettlingEventLog
from jobengine.ports.store import Store
from jobengine.settings import Settings

if TYPE_CHECKING:  # a worker process never follows the log: the feed module is loaded on first use
    from jobengine.feed import EventFeed, EventRead


class EventLog:
    """Follow, read and prune the store's event log.

    ``settling`` is the store when its ids can commit out of order (PostgreSQL), else None: every id of a
    log numbered in commit order is settled.
    """

    def __init__(
        self,
        events: Store,
        bounds: EventLogStore,
        bus: EventBus,
        clock: Clock,
        settings: Settings,
        *,
        settling: SettlingEventLog | None,
        pruning: EventPruneStore,
    ) -> None:
        self._events = events
        self._bounds = bounds
        self._bus = bus
        self._clock = clock
        self._settings = settings
        self._settling = settling
        self._pruning = pruning

    def feed(
        self,
        *,
        after_id: int = 0,
        tenant: str | None = None,
        job_id: str | None = None,
        match: Callable[[Event], bool] | None = None,
        buffer: int | None = None,
        poll_interval: float | None = None,
    ) -> EventFeed:
        """Follow the event log after ``after_id`` (see :mod:`jobengine.feed`); close() it when done."""
        from jobengine.feed import EventFeed

        async def read(after: int, limit: int) -> EventRead:
            return await self.read_settled(after, limit, job_id=job_id, tenant=tenant)

        s = self._settings
        return EventFeed(
            read, self._bus, after_id=after_id, tenant=tenant, job_id=job_id, match=match,
            bounds=self._bounds.event_bounds, buffer=buffer if buffer is not None else s.sse_buffer,
            poll_interval=poll_interval if poll_interval is not None else s.sse_poll_interval,
        )  # fmt: skip

    async def read_settled(
        self, after_id: int, limit: int, *, job_id: str | None = None, tenant: str | None = None
    ) -> EventRead:
        """Events past ``after_id`` (of one job / one tenant when given), oldest first, at most ``limit``, none
        past the settled bound; the result's ``cursor`` is where the next read starts and never passes an id
        whose transaction may still commit (see :class:`~jobengine.feed.EventRead`). Every reader that moves
        a cursor along the log reads through this, so none skips an event that commits late. On a store
        that numbers events in commit order (SQLite, memory) it is a plain read: every id is settled there.

        Usage::

            read = await engine.event_log.read_settled(cursor, 100, tenant="acme")
            handle(read.events)
            cursor = read.cursor  # read.complete: nothing more to read now
        """
        from jobengine.feed import cut_at_settled

        bound = None
        if self._settling is not None:
            # First the bound, then the read: every id the bound settles was committed before the read began.
            bound = await self.settled_id(after_id)
        events = await self._events.list_events(after_id, limit, JobId(job_id) if job_id else None, tenant)
        return cut_at_settled(after_id, limit, events, bound)

    async def settled_id(self, after_id: int) -> tuple[int, int]:
        """``(settled, newest)`` past ``after_id`` (see :class:`~jobengine.ports.eventlog.SettlingEventLog`):
        a follower of the log reads no further than ``settled``. A store that numbers its events in commit
        order has every id settled: ``(newest, newest)``."""
        if self._settling is not None:
            grace = self._settings.event_settle_grace
            return await self._settling.settled_event_id(after_id, self._clock.now(), grace)
        newest = await self.newest_id()
        return newest, newest

    async def prune(self, limit: int = 10_000) -> int:
        """Delete events older than ``settings.event_retention`` seconds (0: keep them all)."""
        keep = self._settings.event_retention
        if keep <= 0:
            return 0
        return await self._pruning.prune_events(self._clock.now() - keep, limit)

    async def newest_id(self) -> int:
        """The id of the newest event (0 for none): where a follower that wants only new events starts."""
        return (await self._bounds.event_bounds())[1]
