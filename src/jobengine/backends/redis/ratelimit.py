"""The Redis rate limiter: a sliding window per key as a sorted set, checked and counted by one Lua script
(atomic in Redis, so every process sharing the server shares the limit). Times are the Redis server's own
clock (``TIME``), so processes whose clocks disagree still agree on the window."""

from __future__ import annotations

import os
from typing import Any

from redis import exceptions as rx
from redis.asyncio import Redis

from jobengine.errors import ConfigError

from .client import open_client

# KEYS[1]: the window's sorted set. ARGV: limit, window (seconds), a unique member.
# Returns 0 when counted, else the milliseconds until the oldest entry leaves the window.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = math.floor(tonumber(ARGV[2]) * 1000000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], now, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
    return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, math.ceil((tonumber(oldest[2]) + window - now) / 1000))
"""


class RedisLimiter:
    name = "redis"

    def __init__(self, url: str, prefix: str = "jobengine:ratelimit:") -> None:
        self.url = url
        self.prefix = prefix
        self._redis: Redis[Any] | None = None  # type: ignore[type-arg,unused-ignore]
        self._script: Any = None
        self._seq = 0
        self._me = os.urandom(6).hex()

    def _client(self) -> Any:
        if self._redis is None:
            self._redis = open_client(self.url, "webhook_redis_url", socket_connect_timeout=2.0, socket_timeout=5.0)
            self._script = self._redis.register_script(_ACQUIRE)
        return self._redis

    async def acquire(self, key: str, limit: int, window: float) -> float:
        self._client()
        self._seq += 1
        member = f"{self._me}:{self._seq}"
        waited = int(await self._script(keys=[self.prefix + key], args=[limit, window, member]))
        return waited / 1000.0

    async def check(self) -> None:
        try:
            await self._client().ping()
        except (rx.RedisError, OSError) as exc:
            raise ConfigError(f"webhook_redis_url: the redis rate limiter cannot reach {self.url}: {exc}") from None

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
