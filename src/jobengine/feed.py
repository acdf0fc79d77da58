"""Following the event log: every event after a position exactly once, in id order, across reconnections.

The store's event log is the source of truth; the in-process bus only makes following it cheap. A feed keeps
a *cursor* (every event at or below it was delivered or is not the follower's) and takes a bus event whose
id is exactly ``cursor + 1`` as it is; on a gap, at the start and every ``poll_interval`` while idle it
reads the log after the cursor through ``Engine.event_log.read_settled``, which never passes an id that may
still commit (PostgreSQL). A position whose events were pruned gets a :class:`Reset` first. Why this never
gaps or repeats: docs/http.md ("Server-sent events") and docs/postgres.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from jobengine.bus import EventBus, Subscription
from jobengine.core.models import Event


@dataclass(frozen=True, slots=True)
class EventRead:
    """One read of the event log past a cursor (``Engine.event_log.read_settled``).

    ``events``: oldest first, already tenant / job filtered, none past the settled bound. ``cursor``: where
    the next read starts; every event of the filter up to it is in ``events`` (or is not the reader's), and
    it never passes a hole that may still fill, so reading on from it skips nothing. ``complete``: nothing
    more to read now (the read was not cut by its limit, or it stopped at the bound). ``settled`` and
    ``newest`` are the bound and the newest id seen on a log whose ids can commit out of order (None on one
    that numbers them in commit order: every id there is settled).
    """

    events: list[Event]
    cursor: int
    complete: bool
    settled: int | None = None
    newest: int | None = None

    @property
    def unsettled(self) -> bool:
        """Events exist past ``settled`` that are held back until the hole before them fills."""
        return self.settled is not None and self.newest is not None and self.settled < self.newest


def cut_at_settled(after_id: int, limit: int, events: list[Event], bound: tuple[int, int] | None) -> EventRead:
    """``events`` (a read of at most ``limit`` past ``after_id``) cut at ``bound`` = ``(settled, newest)``,
    which must have been taken *before* the read: then the read saw every event up to ``settled``."""
    full = len(events) >= limit
    if bound is None:
        return EventRead(events, events[-1].id if events else after_id, not full)
    settled, newest = bound
    kept = [e for e in events if e.id <= settled]
    cut = len(kept) < len(events)
    # A read not cut by its limit covered the log up to the bound, past the reader's last event too (other
    # tenants' events); one cut by its limit covered it up to its last event.
    covered = min(settled, events[-1].id) if full else settled
    # The newest id seen includes what the read saw: an event committed after the bound was taken.
    newest = max(newest, settled, events[-1].id if events else 0)
    return EventRead(kept, max(after_id, covered), cut or not full, settled, newest)


#: Reads the log past a cursor, at most a limit, cut at the settled bound: ``Engine.event_log.read_settled``.
Reader = Callable[[int, int], Awaitable[EventRead]]


@dataclass(frozen=True, slots=True)
class Reset:
    """The position asked for is gone: events after it were pruned (``expired``) or it is beyond the log's
    newest id (``unknown``, e.g. another database). The feed resumes from ``resume_after``."""

    reason: str
    requested: int
    oldest: int
    resume_after: int


class EventFeed:
    """Usage::

    feed = engine.event_log.feed(after_id=last_seen, tenant="acme")
    try:
        reset = await feed.open()
        while True:
            for event in await feed.next(timeout=15.0):
                ...  # deliver; remember event.id
    finally:
        feed.close()
    """

    def __init__(
        self,
        read: Reader,
        bus: EventBus,
        *,
        after_id: int = 0,
        tenant: str | None = None,
        job_id: str | None = None,
        match: Callable[[Event], bool] | None = None,
        bounds: Callable[[], Awaitable[tuple[int, int]]] | None = None,
        buffer: int = 1000,
        poll_interval: float = 1.0,
        batch: int = 500,
        settle_poll: float = 0.05,
    ) -> None:
        self._read = read
        self._settle_poll = settle_poll
        self._unsettled = False  # the last store read stopped at a hole that may still fill
        self._bounds = bounds
        self._tenant = tenant
        self._job_id = job_id
        self._match = match
        self._poll = poll_interval
        self._batch = batch
        self.cursor = max(0, after_id)
        self._sub: Subscription | None = bus.subscribe(buffer)
        self._held: list[Event] = []
        self._dropped_seen = 0
        self._need_read = True
        self.reads = 0  # store reads done (for tests and metrics)

    @property
    def backlog_full(self) -> bool:
        """The bus buffer is full: this follower is not taking events as fast as they come."""
        return self._sub is not None and (self._sub.full or self._sub.dropped > self._dropped_seen)

    async def open(self) -> Reset | None:
        """Check the starting position against the log's bounds; a Reset says what was lost."""
        if self._bounds is None or self.cursor == 0:
            return None
        oldest, newest = await self._bounds()
        if newest and self.cursor > newest:
            return self._reset("unknown", oldest, 0)
        if oldest and self.cursor < oldest - 1:
            return self._reset("expired", oldest, oldest - 1)
        return None

    def _reset(self, reason: str, oldest: int, resume_after: int) -> Reset:
        reset = Reset(reason, self.cursor, oldest, resume_after)
        self.cursor = resume_after
        return reset

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close()
            self._sub = None

    def _wanted(self, e: Event) -> bool:
        if self._tenant is not None and e.tenant != self._tenant:
            return False
        if self._job_id is not None and e.job_id != self._job_id:
            return False
        return self._match is None or self._match(e)

    def _take_buffered(self) -> None:
        sub = self._sub
        assert sub is not None
        if sub.dropped > self._dropped_seen:  # the bus dropped some: only the store has them now
            self._dropped_seen = sub.dropped
            self._need_read = True
        while (e := sub.get_nowait()) is not None:
            self._held.append(e)

    async def _read_store(self) -> list[Event]:
        horizon = max((e.id for e in self._held), default=0)
        read = await self._read(self.cursor, self._batch)
        self.reads += 1
        self.cursor = max(self.cursor, read.cursor)
        if read.complete and read.settled is None:
            # Every buffered bus event was committed before this read began, so the read covered it. With
            # a settled bound, the read's cursor already stops at it (the rest waits for its hole to fill).
            self.cursor = max(self.cursor, horizon)
        self._unsettled = read.settled is not None and read.settled < max(read.newest or 0, horizon)
        self._need_read = not read.complete or self._unsettled
        self._held = [e for e in self._held if e.id > self.cursor]
        return [e for e in read.events if self._match is None or self._match(e)]

    def _fast_path(self) -> list[Event]:
        out: list[Event] = []
        self._held.sort(key=lambda e: e.id)
        taken = 0
        for e in self._held:
            if e.id <= self.cursor:
                taken += 1
                continue
            if e.id != self.cursor + 1:
                self._need_read = True  # a gap: some event never reached the bus
                break
            self.cursor = e.id
            taken += 1
            if self._wanted(e):
                out.append(e)
        del self._held[:taken]
        return out

    async def next(self, timeout: float) -> Sequence[Event]:
        """The next events (in id order), waiting up to ``timeout`` seconds; empty on timeout."""
        if self._sub is None:
            raise RuntimeError("the feed is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        idle_since = loop.time()
        while True:
            self._take_buffered()
            out = await self._read_store() if self._need_read else self._fast_path()
            if out:
                return out
            if self._unsettled:  # a hole that may still fill: look again shortly, not at once
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                await asyncio.sleep(min(self._settle_poll, remaining))
                continue
            if self._need_read:
                continue
            now = loop.time()
            if now >= deadline:
                return []
            wait = min(deadline - now, max(0.0, idle_since + self._poll - now))
            try:
                async with asyncio.timeout(wait):
                    self._held.append(await self._sub.get())
            except TimeoutError:
                if loop.time() - idle_since >= self._poll:
                    self._need_read = True  # idle for a poll interval: look for other processes' events
                    idle_since = loop.time()
