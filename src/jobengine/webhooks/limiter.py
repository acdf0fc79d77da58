"""Rate limiters for webhooks (port: :mod:`jobengine.ports.ratelimit`): ``noop`` and ``local`` (one process,
the embedded mode) here; ``redis`` (shared by every process) in ``backends/redis/ratelimit.py``."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from jobengine.errors import ConfigError
from jobengine.ports.ratelimit import RateLimiter

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


def make_limiter(kind: str, redis_url: str, prefix: str = "jobengine:ratelimit:") -> RateLimiter:
    """The limiter a ``webhook_rate_limiter`` setting names. ``redis`` needs ``redis_url`` (and the redis
    extra); whether the server answers is checked by ``check()`` at start-up."""
    if kind == "noop":
        return NoopLimiter()
    if kind == "local":
        return LocalLimiter()
    if kind == "redis":
        if not redis_url:
            raise ConfigError("webhook_redis_url: the redis rate limiter needs a Redis URL (redis://host:6379/0)")
        try:
            from jobengine.backends.redis.ratelimit import RedisLimiter
        except ImportError as exc:
            raise ConfigError(f"webhook_rate_limiter: redis needs the redis extra: pip install 'jobengine[redis]' "
                              f"({exc})") from None  # fmt: skip
        return RedisLimiter(redis_url, prefix)
    raise ConfigError(f"webhook_rate_limiter: {kind!r} is not one of {', '.join(LIMITERS)}")
