"""LISTEN/NOTIFY: wakes idle workers in every process as soon as a runnable job commits.

The store's statements send ``pg_notify(channel, queue)`` inside the transaction that makes jobs runnable,
so the notification is delivered exactly when (and only if) that transaction commits. A dedicated
connection LISTENs in a background task, one per event loop that waits on the notifier (an asyncio event
and an async connection both belong to one loop; the engine's synchronous facade runs a loop of its own).
Listening starts with the first :meth:`wait`, so a process that only enqueues (and calls :meth:`notify`)
opens no LISTEN connection and is not woken by every commit; once listening, a probe query catches a commit
made before the LISTEN was in place.

Failure policy: when the listening connection drops (restart, ``pg_terminate_backend``), the task wakes
every waiter (so workers poll once instead of trusting a dead channel), then reconnects with backoff; on
reconnect it wakes them again, because notifications sent while it was away are lost. Waiters never see an
error: at worst they fall back to their poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from jobengine.aio import call_on
from jobengine.backends.postgres.mixin import session
from jobengine.backends.postgres.pool import RECONNECT_CEILING

log = logging.getLogger("jobengine.postgres")


class _Listener:
    """The state of one event loop: its waiters' event, and its LISTEN task."""

    __slots__ = ("event", "listening", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()
        self.listening = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        if not self.loop.is_closed():
            call_on(self.loop, self.event.set)


class PgNotifier:
    def __init__(
        self, dsn: str, channel: str, *, probe: bytes | None = None, max_backoff: float = RECONNECT_CEILING
    ) -> None:
        self._dsn = dsn
        self._channel = channel
        self._probe = probe
        self._max_backoff = max_backoff
        self._listeners: dict[asyncio.AbstractEventLoop, _Listener] = {}
        self._closed = False
        #: How many times a LISTEN connection was lost and made again (tests and diagnostics).
        self.reconnects = 0

    def notify(self) -> None:
        """Wake the waiters of this process, in every loop (other processes hear the store's NOTIFY). In a
        running loop that has not waited yet, the wake-up is kept for its first :meth:`wait`."""
        with contextlib.suppress(RuntimeError):  # no running loop: only the existing states are woken
            self._state(asyncio.get_running_loop())
        for listener in list(self._listeners.values()):
            listener.wake()

    async def wait(self, timeout: float) -> bool:
        event = self._listener().event
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that arrives as the
            # event is set, and a worker's pump waiting here ran on after its stop.
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        event.clear()
        return True

    @property
    def listening(self) -> bool:
        """Whether a LISTEN is in place now for the running loop (tests and diagnostics)."""
        try:
            listener = self._listeners.get(asyncio.get_running_loop())
        except RuntimeError:
            return False
        return listener is not None and listener.listening.is_set()

    async def started(self, timeout: float = 5.0) -> None:
        """Start listening and return once the LISTEN is in place (so no later commit can be missed)."""
        async with asyncio.timeout(timeout):
            await self._listener().listening.wait()

    def start(self) -> None:
        """Start listening now if called inside a running loop (else on the first :meth:`wait`)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._listener()

    async def close(self) -> None:
        self._closed = True
        current = asyncio.get_running_loop()
        listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            task = listener.task
            if task is None:
                continue
            if listener.loop is current:
                task.cancel()
                # Bounded: a driver call that swallowed the cancellation must not hang the shutdown.
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    async with asyncio.timeout(2.0):
                        await task
            elif not listener.loop.is_closed():
                listener.loop.call_soon_threadsafe(task.cancel)
            listener.wake()

    def _state(self, loop: asyncio.AbstractEventLoop) -> _Listener:
        listener = self._listeners.get(loop)
        if listener is None:
            for old in [lp for lp in self._listeners if lp.is_closed()]:
                del self._listeners[old]
            listener = self._listeners[loop] = _Listener(loop)
        return listener

    def _listener(self) -> _Listener:
        """The running loop's state, listening (the LISTEN task started on first use)."""
        loop = asyncio.get_running_loop()
        listener = self._state(loop)
        if listener.task is None and not self._closed:
            listener.task = loop.create_task(self._listen(listener), name="jobengine-pg-listen")
        return listener

    async def _missed(self, conn: psycopg.AsyncConnection[tuple[object, ...]], lost: bool) -> bool:
        """Whether a job may have become runnable while we were not listening. The waiter that started us
        (a worker, right after a claim that found nothing) would otherwise sleep through a commit made
        before our LISTEN: the probe asks the database whether runnable work exists now. Without a probe,
        only a lost connection counts (its waiters were already woken once when it dropped)."""
        if self._probe is None:
            return lost
        cur = await conn.execute(self._probe)
        row = await cur.fetchone()
        return bool(row and row[0])

    def _stopping(self) -> bool:
        return self._closed

    async def _listen(self, listener: _Listener) -> None:
        event, listening = listener.event, listener.listening
        backoff = 0.05
        lost = False
        while not self._stopping():
            conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
            try:
                # A server gone silently is noticed by the keepalives; waiters poll meanwhile (their wait is
                # bounded by the poll interval).
                conn = await session(self._dsn)
                await conn.execute(f'LISTEN "{self._channel}"'.encode())
                listening.set()
                backoff = 0.05
                if await self._missed(conn, lost):
                    event.set()
                async for _ in conn.notifies():
                    event.set()
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("LISTEN connection lost (%s); reconnecting in %.2fs", exc, backoff)
            finally:
                listening.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            if self._stopping():
                return
            lost = True
            self.reconnects += 1
            event.set()  # poll once while we are deaf
            await asyncio.sleep(backoff)
            backoff = min(self._max_backoff, backoff * 2)
