"""In-process fan-out of events to subscribers (SSE, webhooks, the CLI's live view, metrics).

Events are already durable in the store before they reach the bus; a subscriber that falls behind by more
than its buffer loses the overflow (counted in ``Subscription.dropped``) and can catch up from the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

from jobengine.core.models import Event


class Subscription:
    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self.dropped = 0

    def _offer(self, event: Event) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def get(self) -> Event:
        return await self._queue.get()

    def get_nowait(self) -> Event | None:
        """The next buffered event, or None if there is none."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    @property
    def pending(self) -> int:
        """Events buffered and not taken yet (a full buffer drops what comes next)."""
        return self._queue.qsize()

    @property
    def full(self) -> bool:
        return self._queue.full()

    def close(self) -> None:
        self._bus._subs.discard(self)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            yield await self._queue.get()


class EventBus:
    def __init__(self) -> None:
        self._subs: set[Subscription] = set()
        self._listeners: list[Callable[[Event], None]] = []

    def subscribe(self, maxsize: int = 10_000) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.add(sub)
        return sub

    def add_listener(self, fn: Callable[[Event], None]) -> None:
        """A synchronous callback run for every event; it must be quick and must not raise."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[Event], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def publish(self, events: Iterable[Event]) -> None:
        if not self._subs and not self._listeners:
            return
        for event in events:
            for sub in tuple(self._subs):
                sub._offer(event)
            for fn in self._listeners:
                fn(event)
