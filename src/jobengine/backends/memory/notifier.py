"""In-process notifier: an asyncio.Event set by notify() (from any thread)."""

from __future__ import annotations

import asyncio
import threading


class LocalNotifier:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def notify(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running() and threading.get_ident() != getattr(loop, "_thread_id", None):
            loop.call_soon_threadsafe(self._event.set)
        else:
            self._event.set()

    async def wait(self, timeout: float) -> bool:
        self._loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that arrives
            # just as the event is set, which left Worker.run() waiting forever for its cancelled pump.
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        self._event.clear()
        return True

    async def close(self) -> None:
        self._event.set()
