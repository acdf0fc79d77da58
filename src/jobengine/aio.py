"""Small asyncio helpers shared by every layer (this module imports nothing of jobengine's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


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
