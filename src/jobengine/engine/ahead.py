"""Caches of the store that are read again before they expire: :class:`ReadAhead`.

Every claim consults the queues' settings and every enqueue and claim the flow limits, each cached for a
time. A caller that finds such a cache expired waits for one more round trip before its own statement: at a
steady rate, one claim or enqueue in every few hundred, and those jobs start late. Read ahead, a cache
past half its time is still served while one read runs in the background, so a steady caller never waits;
past its whole time (after an idle spell) a caller reads it, so no value is served older than the cache's
time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("jobengine.engine")


class ReadAhead:
    """At most one background read of a cache at a time (per owner). Its owner calls
    ``self._ahead.start(self._reload)`` when the cache is past half its time, and awaits ``self._reload()``
    itself when it is past all of it."""

    __slots__ = ("_name", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self, read: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``read()`` in the background on the running loop, unless a read started here is still running."""
        task = self._task
        if task is not None and not task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._quietly(read()), name=f"jobengine-{self._name}")

    async def _quietly(self, read: Coroutine[Any, Any, None]) -> None:
        try:
            await read
        except Exception as exc:  # the cache stays as it was; a caller past its time reads it and gets the error
            log.debug("reading %s ahead failed: %s", self._name, exc)
