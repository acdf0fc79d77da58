"""Time as a value passed in, so tests drive it. All times are float UNIX seconds (UTC)."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Protocol

from jobengine.core.bounds import clamp_time


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, value: float) -> None:
        self._now = value


def to_datetime(ts: float | None) -> datetime | None:
    """A stored time as a datetime in UTC; a time out of the bounds (``core.bounds``) is clamped to them,
    so a row written before the bounds, or by another program, still reads."""
    seconds = clamp_time(ts)
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


@functools.lru_cache(maxsize=1024)
def iso(ts: float | None) -> str | None:
    """ISO 8601 in UTC with milliseconds; clamped like :func:`to_datetime`. Cached: the jobs of one batch
    (an API answer, a page of a list) share their times, and a datetime costs more than the lookup."""
    moment = to_datetime(ts)
    return None if moment is None else moment.isoformat(timespec="milliseconds")
