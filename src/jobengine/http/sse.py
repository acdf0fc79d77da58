"""Server-Sent Events over an :class:`~jobengine.feed.EventFeed` (sse-starlette does the framing).

Each frame is ``id: <event id>``, ``event: <type>``, ``data: <event JSON>``. A client that reconnects with
``Last-Event-ID`` resumes right after that event, with no gap and no duplicate (the feed's guarantee). If
events after it were pruned, the first frame is ``event: reset`` (data: reason, the id asked for, the oldest
retained id, and where the stream resumes; its ``id:`` is that position). Idle streams get a comment line
every ``sse_keepalive`` seconds, so proxies keep them open.

A client that stops reading is dropped: its buffer (``sse_buffer`` events on the bus) is full while a write
to its socket has been blocked for ``STALL`` seconds. Nothing is lost for it: it reconnects with the last
id it received and resumes from the store. A fast client that is merely behind a burst is not dropped, as
its writes keep completing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import anyio
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send

from jobengine.core import codec
from jobengine.core.models import Event
from jobengine.feed import EventFeed
from jobengine.http.metrics import Metrics
from jobengine.serialize import event_to_json

#: Seconds a write to a client with a full buffer may stay blocked before the client is dropped.
STALL = 0.5
_WATCH_EVERY = 0.1
#: Reconnection delay (ms) suggested to clients, in the first frame.
RETRY_MS = 1000


Select = Callable[[Sequence[Event]], Awaitable[list[Event]]]


async def frames(feed: EventFeed, keepalive: float, select: Select | None = None) -> AsyncIterator[ServerSentEvent]:
    """The frames of a stream: an optional reset, then every event (that ``select`` keeps) as it comes.
    Closes the feed."""
    try:
        reset = await feed.open()
        if reset is not None:
            data = {"reason": reset.reason, "requested": reset.requested, "oldest": reset.oldest,
                    "resume_after": reset.resume_after}  # fmt: skip
            yield ServerSentEvent(codec.dumps(data), event="reset", id=str(reset.resume_after), retry=RETRY_MS)
        while True:
            events = await feed.next(timeout=keepalive)
            for event in await select(events) if select is not None and events else events:
                yield ServerSentEvent(codec.dumps(event_to_json(event)), event=event.type, id=str(event.id))
    finally:
        feed.close()


class FeedResponse(EventSourceResponse):
    """An EventSourceResponse that drops a client which stops reading (see the module docstring)."""

    def __init__(
        self,
        feed: EventFeed,
        metrics: Metrics,
        keepalive: float,
        closing: Callable[[], bool] = lambda: False,
        select: Select | None = None,
    ) -> None:
        super().__init__(
            frames(feed, keepalive, select), ping=keepalive, sep="\n", headers={"Cache-Control": "no-store"},
        )  # fmt: skip
        self.feed = feed
        self.metrics = metrics
        self.closing = closing
        self.dropped = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        blocked_since: float | None = None

        async def watched(message: Message) -> None:
            nonlocal blocked_since
            blocked_since = time.monotonic()
            try:
                await send(message)
            finally:
                blocked_since = None

        self.metrics.sse_clients.inc()
        try:
            async with anyio.create_task_group() as tg:

                async def watchdog() -> None:
                    while True:
                        await anyio.sleep(_WATCH_EVERY)
                        if self.closing():  # the server is stopping: end the stream (clients reconnect)
                            tg.cancel_scope.cancel()
                            return
                        since = blocked_since
                        if since is not None and self.feed.backlog_full and time.monotonic() - since >= STALL:
                            self.dropped = True
                            self.metrics.sse_dropped.inc()
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(watchdog)
                await super().__call__(scope, receive, watched)
                tg.cancel_scope.cancel()
        finally:
            self.metrics.sse_clients.dec()
            self.feed.close()
