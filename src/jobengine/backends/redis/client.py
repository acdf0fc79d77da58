"""Turning a Redis URL into a client: one server (``redis://``, ``rediss://``, ``unix://``) or the master that
Redis Sentinel names (``redis+sentinel://``, see :mod:`jobengine.core.redis_url`).

A Sentinel client asks the Sentinels for the master's address each time it opens a connection, so after a
failover its next connection reaches the promoted replica. A connection still open to a master that was
demoted meets ``READONLY``; redis-py's Sentinel connection turns that into a ``ConnectionError`` and drops
the connection, so the command is retried on a fresh one (on the new master). Usage::

    client = open_client("redis+sentinel://s1:26379,s2:26379/jobs/0", "queue.redis.url", client_name="w1")
    await client.ping()
    await client.aclose()  # closes the Sentinel clients too
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from jobengine.core.redis_url import is_sentinel_url, parse_sentinel_url

#: Seconds to wait for a Sentinel's answer: one that hangs must not stall the search for the master.
SENTINEL_TIMEOUT = 2.0


class SentinelRedis(Redis):
    """The client ``master_for`` returns, which also closes the Sentinel clients it was found through."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool: Any = self.connection_pool  # a SentinelConnectionPool, which the stubs do not know
        await pool.sentinel_manager.aclose()


def open_client(url: str, setting: str, **options: Any) -> Redis:
    """A client of ``url`` with redis-py connection ``options``. A malformed Sentinel URL raises ConfigError
    naming ``setting``; nothing connects before the first command."""
    if not is_sentinel_url(url):
        return Redis.from_url(url, **options)
    parsed = parse_sentinel_url(url, setting)
    # No retries against one Sentinel (redis-py's default backs off for seconds): one that is down is skipped
    # for the next at once, and with all of them down the caller hears so now and retries on its own terms.
    asking = {
        "socket_connect_timeout": SENTINEL_TIMEOUT,
        "socket_timeout": SENTINEL_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
    }
    sentinel = Sentinel(list(parsed.sentinels), sentinel_kwargs=asking)  # type: ignore[no-untyped-call]
    client: Redis = sentinel.master_for(
        parsed.service,
        redis_class=SentinelRedis,
        db=parsed.db,
        username=parsed.username,
        password=parsed.password,
        **options,
    )
    return client
