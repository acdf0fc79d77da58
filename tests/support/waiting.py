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
    while not (value := _look(check, deadline, timeout, what)):
        time.sleep(every)
    return value


async def until(check: Callable[[], T], what: str = "the condition", *, timeout: float = 60.0,
                every: float = 0.01) -> T:  # fmt: skip
    """:func:`wait_for` on a running event loop, for state that no event announces (a counter, another
    thread's list): the loop goes on between the checks. The ceiling is generous for a busy machine."""
    deadline = time.monotonic() + timeout
    # Polling is the point: what is checked has no event to wait on.
    while not (value := _look(check, deadline, timeout, what)):  # noqa: ASYNC110
        await asyncio.sleep(every)
    return value


def _look(check: Callable[[], T], deadline: float, timeout: float, what: str) -> T:
    """One call of ``check``; past the deadline, a falsy answer fails the test."""
    value = check()
    if not value and time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
    return value
