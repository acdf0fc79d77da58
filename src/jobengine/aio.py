"""Small asyncio helpers shared by every layer (this module imports nothing of jobengine's)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None (a plain thread, a sync caller): for code that is called
    both on a loop and off it and must tell which."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_on(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` on ``loop``: now when this thread is running it (or there is no open loop to hand it to),
    else handed to it thread-safely, to run at its next turn. For objects of one loop (an ``asyncio.Event``,
    a task) that other threads must reach: a sync facade's thread, a task's executor thread."""
    if loop is None or loop.is_closed() or running_loop() is loop:
        fn(*args)
    else:
        loop.call_soon_threadsafe(fn, *args)


class TurnBatch(Generic[T]):
    """Items added on a running event loop, handed to ``write`` together at the loop's next turn: one write
    (one system call) for all that the turn produced, instead of one per item, and none between the steps of
    the code that adds them. An item added off a loop is written at once, after those still waiting.
    ``lock`` (re-entrant: ``write`` may be reached from code that holds it) keeps the items of concurrent
    threads and their writes in order. ``on_error``: what a failed write at the loop's turn does instead of
    raising into the loop; a write from :meth:`add` off a loop or from :meth:`flush` raises to its caller."""

    def __init__(
        self,
        write: Callable[[list[T]], None],
        lock: threading.RLock | None = None,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self._write = write
        self._lock = lock if lock is not None else threading.RLock()
        self._on_error = on_error
        self._items: list[T] = []
        self._turn_of: asyncio.AbstractEventLoop | None = None  # the loop whose next turn writes them

    def __bool__(self) -> bool:
        """Whether items wait."""
        return bool(self._items)

    def add(self, item: T) -> None:
        loop = running_loop()
        with self._lock:
            self._items.append(item)
            if loop is None:
                self.flush()
            elif self._turn_of is not loop:  # a loop that closed first leaves them to the next add or flush
                self._turn_of = loop
                loop.call_soon(self._at_turn)

    def flush(self) -> None:
        """Write the waiting items now."""
        with self._lock:
            items, self._items, self._turn_of = self._items, [], None
            if items:
                self._write(items)

    def _at_turn(self) -> None:
        try:
            self.flush()
        except Exception:
            if self._on_error is None:
                raise
            self._on_error()
