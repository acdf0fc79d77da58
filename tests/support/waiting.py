"""Waiting in tests for something another process does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, *, every: float = 0.05) -> T:
    """Call ``check`` every ``every`` seconds until it returns something truthy, and return that; fail
    naming ``what`` after ``timeout`` seconds (``check`` is always called once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


async def until(check: Callable[[], T], timeout: float, what: str, *, every: float = 0.01) -> T:
    """:func:`wait_for` on a running event loop: the loop goes on between the checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)
