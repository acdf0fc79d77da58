"""A Notifier that wakes on commits from any process sharing the SQLite file.

``PRAGMA data_version`` changes whenever *another* connection commits, in this process or any other.
Asking costs microseconds and no disk I/O in WAL mode (it reads the shared-memory wal-index header), so
the notifier asks on its own read connection, inline on the event loop: a trip through the store's write
thread would queue behind real work, and a thread of its own would cost more than the question. It polls
only while someone waits, and remembers the last version it saw, so a commit that lands while nobody waits
still wakes the next ``wait()`` at once (no lost wake-up between a worker's empty fetch and its wait).

It asks every ``interval`` seconds while commits come, and less often as the file stays quiet: the pause
is a twentieth of the quiet so far (:data:`QUIET_SHARE`), at most :data:`SLOWEST`. Each wake-up of the
loop costs far more than the question, and an idle worker asking every 2 ms spent a twentieth of a core
on it; a commit after a quiet spell is now seen within a twentieth of that spell, never later than
:data:`SLOWEST`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from typing import Final

from jobengine.aio import call_on, forks
from jobengine.errors import StoreUnavailable

from .connection import OwnConnection, connect

#: The longest pause between two questions, however long the file has been quiet.
SLOWEST: Final = 0.05
#: The pause grows with the quiet: this share of the time since the last commit (or local notify).
QUIET_SHARE: Final = 1 / 20


class SqliteNotifier:
    """Wakes ``wait()`` on ``notify()`` in this process or on any commit to the database file.

    Example::

        notifier = store.notifier()
        if await notifier.wait(timeout=5.0):
            ...  # fetch
        await notifier.close()

    Spurious wake-ups happen (e.g. after this process's own commits); callers simply fetch again.
    Raises StoreUnavailable from the constructor if the file cannot be opened.
    """

    def __init__(self, path: str, *, interval: float = 0.002, busy_timeout_ms: int = 1000) -> None:
        self._interval = interval
        self._closed = False
        self._conn = OwnConnection(lambda: connect(path, busy_timeout_ms=busy_timeout_ms))
        # Opened now, not at the first wait, so the baseline predates the caller's first fetch.
        self._conn.get()
        self._fork = forks()  # the fork the event and the poller belong to (see _own)
        self._version = self._read_version()
        self._active = time.monotonic()  # the last commit seen or notify(): polling slows as it ages
        self._wake = asyncio.Event()
        self._waiters = 0
        self._poller: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the waiters' loop, once someone waited

    @property
    def closed(self) -> bool:
        return self._closed

    def notify(self) -> None:
        """Wake waiters now. Safe from any thread: off the waiters' loop it is handed over to that loop."""
        self._own()
        self._active = time.monotonic()
        call_on(self._loop, self._wake.set)

    async def wait(self, timeout: float) -> bool:
        if self._closed:
            return False
        self._own()
        self._waiters += 1
        try:
            if self._poller is None or self._poller.done():
                self._loop = asyncio.get_running_loop()
                self._poller = self._loop.create_task(self._poll(), name="jobengine-sqlite-notify")
            if not self._wake.is_set():
                try:
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                except TimeoutError:
                    return False
            if self.closed:  # woken by close(), not by work
                return False
            self._wake.clear()
            return True
        finally:
            self._waiters -= 1

    async def close(self) -> None:
        """Stop polling, release waiters (they return False) and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        self._conn.close()

    def _own(self) -> None:
        """Give the caller's loop an event and a poller of its own when the ones here are another's: in a child
        forked after they were made, or once the loop they served has closed (a second ``asyncio.run``). A
        wake-up not yet taken is kept. (The connection sees to its own fork: :class:`OwnConnection`.)"""
        if self._fork == forks() and (self._loop is None or not self._loop.is_closed()):
            return
        self._fork = forks()
        woken = self._wake.is_set()
        self._wake, self._poller, self._loop, self._waiters = asyncio.Event(), None, None, 0
        if woken:
            self._wake.set()

    async def _poll(self) -> None:
        while self._waiters > 0 and not self._closed:
            version = self._read_version()
            now = time.monotonic()
            if version is not None and version != self._version:
                self._version = version
                self._active = now
                self._wake.set()
            await asyncio.sleep(min(SLOWEST, max(self._interval, (now - self._active) * QUIET_SHARE)))

    def _read_version(self) -> int | None:
        if self._closed:
            return None
        try:
            return int(self._conn.get().execute("PRAGMA data_version").fetchone()[0])
        except (sqlite3.Error, StoreUnavailable):
            # Unreadable for a moment (e.g. the file is being replaced, or a forked child cannot open its own
            # connection yet): no wake-up; the caller's timeout still bounds how long it sleeps, and its next
            # fetch reports the real error.
            return None
