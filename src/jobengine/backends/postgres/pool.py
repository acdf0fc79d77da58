"""The store's connection pool: psycopg_pool's, with its reconnection backoff capped.

psycopg_pool makes a lost connection again with a backoff that doubles from 1 s up to its
``reconnect_timeout`` (5 minutes): after the server has been down for a minute, its next try comes up to a
minute after the server is back, and every store call of the process waits (or fails with
``StoreUnavailable``) meanwhile. Capped, a pool tries at least every ``RECONNECT_CEILING`` seconds, so a
process is back at work within that of its database, however long the outage lasted. A refused connection
is cheap to try, and a pool makes at most ``max_size`` tries at once.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

#: The longest a pool, a lane or a session (LISTEN, liveness) waits between two tries to connect.
RECONNECT_CEILING = 2.0


class ReconnectingPool(AsyncConnectionPool[Any]):
    """An ``AsyncConnectionPool`` whose reconnection tries are :data:`RECONNECT_CEILING` apart at most.

    The pool passes one attempt object to each try of a connection (``_add_connection``); after a failed
    try, the attempt multiplies its ``delay`` by its ``DELAY_BACKOFF`` and the next try waits that long.
    Bounding the delay a try starts with bounds the wait after it. Only those two attributes are relied on
    (the attempt's class was renamed between psycopg_pool releases; both names have them)."""

    async def _add_connection(self, attempt: Any, growing: bool = False) -> None:
        if attempt is not None:
            attempt.delay = min(attempt.delay, RECONNECT_CEILING / attempt.DELAY_BACKOFF)
        await super()._add_connection(attempt, growing=growing)
