"""EventFeed: every event after a position once, in order, whether it came through the bus or only the store."""

from __future__ import annotations

from jobengine.bus import EventBus
from jobengine.core.ids import JobId
from jobengine.core.models import Event
from jobengine.feed import EventFeed, EventRead, cut_at_settled


class Log:
    """A fake event log: events appended here are "committed"; publish() also puts them on the bus."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.bus = EventBus()
        self.reads = 0
        self.oldest = 1

    def append(self, tenant: str = "a", publish: bool = True, type_: str = "job.enqueued") -> Event:
        e = Event(len(self.events) + 1, 0.0, type_, tenant, JobId(f"j{len(self.events) + 1}"), "q", "t", {})
        self.events.append(e)
        if publish:
            self.bus.publish([e])
        return e

    async def read(self, after: int, limit: int, tenant: str | None = "a") -> EventRead:
        self.reads += 1
        out = [
            e for e in self.events if e.id > after and e.id >= self.oldest and (tenant is None or e.tenant == tenant)
        ]
        return cut_at_settled(after, limit, out[:limit], None)  # every id settled, as on SQLite

    async def bounds(self) -> tuple[int, int]:
        kept = [e.id for e in self.events if e.id >= self.oldest]
        return (kept[0] if kept else 0, self.events[-1].id if self.events else 0)

    def feed(self, after: int = 0, **kw: object) -> EventFeed:
        return EventFeed(self.read, self.bus, after_id=after, tenant="a", bounds=self.bounds, poll_interval=0.05,
                         batch=3, **kw)  # type: ignore[arg-type]  # fmt: skip


async def drain(feed: EventFeed, want: int) -> list[int]:
    got: list[int] = []
    while len(got) < want:
        batch = await feed.next(timeout=1.0)
        assert batch, f"stalled after {got}"
        got += [e.id for e in batch]
    return got


async def test_catch_up_from_the_store_then_follow_the_bus_without_reads() -> None:
    log = Log()
    for _ in range(7):
        log.append()
    feed = log.feed()
    assert await drain(feed, 7) == [1, 2, 3, 4, 5, 6, 7]  # three batches of 3 from the store
    reads = log.reads
    for _ in range(5):
        log.append()
    assert await drain(feed, 5) == [8, 9, 10, 11, 12]
    assert log.reads == reads  # contiguous bus events: no store read
    feed.close()


async def test_events_missing_from_the_bus_are_read_from_the_store_in_order() -> None:
    log = Log()
    feed = log.feed()
    assert await feed.next(0.01) == []
    log.append()
    log.append(publish=False)  # another process committed it: never on this bus
    log.append(tenant="b")  # another tenant's: on the bus, never delivered
    log.append()
    got = await drain(feed, 3)
    assert got == [1, 2, 4]
    log.append(publish=False)  # idle: found by the poll
    assert await drain(feed, 1) == [5]
    feed.close()


async def test_a_bus_overflow_loses_nothing() -> None:
    log = Log()
    feed = log.feed(buffer=2)
    for _ in range(10):
        log.append()
    assert feed.backlog_full
    assert await drain(feed, 10) == list(range(1, 11))
    assert not feed.backlog_full
    feed.close()


async def test_resuming_after_a_position_and_the_reset_of_a_pruned_one() -> None:
    log = Log()
    for _ in range(6):
        log.append()
    resumed = log.feed(after=4)
    assert await resumed.open() is None
    assert await drain(resumed, 2) == [5, 6]
    log.oldest = 4  # events 1-3 were pruned
    stale = log.feed(after=1)
    reset = await stale.open()
    assert reset is not None and (reset.reason, reset.oldest, reset.resume_after) == ("expired", 4, 3)
    assert await drain(stale, 3) == [4, 5, 6]
    future = log.feed(after=99)
    reset = await future.open()
    assert reset is not None and reset.reason == "unknown" and await drain(future, 3) == [4, 5, 6]
    for f in (resumed, stale, future):
        f.close()
    assert not log.bus._subs


def test_a_read_is_cut_at_the_settled_bound_and_its_cursor_never_passes_it() -> None:
    log = Log()
    events = [log.append(publish=False) for _ in range(6)]
    # Every id settled (SQLite, memory): the cursor is the last event read; a full read is not complete.
    assert cut_at_settled(0, 3, events[:3], None) == EventRead(events[:3], 3, False)
    assert cut_at_settled(4, 3, [], None) == EventRead([], 4, True)
    # A read past the bound (id 4 still open, 5 and 6 committed): cut before it, the cursor stops at 3.
    read = cut_at_settled(0, 10, events[:2] + events[4:], (3, 6))
    assert [e.id for e in read.events] == [1, 2] and read.cursor == 3 and read.complete and read.unsettled
    read = cut_at_settled(0, 3, events[:2] + events[4:5], (3, 6))  # cut by its limit and by the bound
    assert [e.id for e in read.events] == [1, 2] and read.cursor == 3 and read.complete
    # Cut by its limit inside the bound: more to read at once, from the last event read.
    read = cut_at_settled(0, 2, events[:2], (6, 6))
    assert read.cursor == 2 and not read.complete and not read.unsettled
    # A complete read of one tenant's events covers the log up to the bound (other tenants' events too).
    read = cut_at_settled(0, 10, [events[1]], (6, 6))
    assert read.cursor == 6 and read.complete and not read.unsettled
    # An event committed after the bound was taken counts as seen: the reader looks again.
    read = cut_at_settled(0, 10, events, (5, 5))
    assert read.cursor == 5 and read.unsettled and [e.id for e in read.events] == [1, 2, 3, 4, 5]
