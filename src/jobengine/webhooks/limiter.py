"""Rate limiters for webhooks (port: :mod:`jobengine.ports.ratelimit`): ``noop`` and ``local`` (one process,
the embedded mode) here; ``redis`` (shared by every process) in ``backends/redis/ratelimit.py``. The
composition root (:func:`jobengine.engine.compose.open_rate_limiter`) chooses among them."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

LIMITERS = ("noop", "local", "redis")


class NoopLimiter:
    """Limits off: every acquire succeeds."""

    name = "noop"

    async def acquire(self, key: str, limit: int, window: float) -> float:
        return 0.0

    async def check(self) -> None:
        return None

    async def close(self) -> None:
        return None


class LocalLimiter:
    """A sliding log per key in this process: exact within it, unaware of other processes."""

    name = "local"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._logs: dict[str, deque[float]] = {}

    async def acquire(self, key: str, limit: int, window: float) -> float:
        now = self._clock()
        log = self._logs.setdefault(key, deque())
        while log and log[0] <= now - window:
            log.popleft()
        if len(log) < limit:
            log.append(now)
            return 0.0
        return max(0.001, log[0] + window - now)

    async def check(self) -> None:
        return None

    async def close(self) -> None:
        return None
