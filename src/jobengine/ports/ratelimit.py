"""The rate limiter port: one sliding-window check per delivery (or inbound request).

``acquire(key, limit, window)`` counts one use of ``key`` and returns 0.0 when fewer than ``limit`` uses
were counted in the last ``window`` seconds; otherwise it counts nothing and returns how many seconds to
wait before the window has room (the caller waits and asks again: over the limit a delivery waits, it is
never dropped). Implementations: ``NoopLimiter`` and ``LocalLimiter`` (one process; jobengine.webhooks.
limiter), ``RedisLimiter`` (shared by every process: one atomic Lua script on a sorted set per key;
jobengine.backends.redis.ratelimit).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class RateLimiter(Protocol):
    name: str

    async def acquire(self, key: str, limit: int, window: float) -> float: ...

    async def check(self) -> None:
        """Raise (ConfigError) when the limiter cannot work (its Redis is unreachable)."""
        ...

    async def close(self) -> None: ...
