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
from psycopg_pool.base import AttemptWithBackoff

#: The longest a pool, a lane or a session (LISTEN, liveness) waits between two tries to connect.
RECONNECT_CEILING = 2.0


class CappedAttempt(AttemptWithBackoff):
    """psycopg_pool's reconnection backoff (from 1 s, doubling, with jitter), never above the ceiling."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_CEILING)


class ReconnectingPool(AsyncConnectionPool[Any]):
    """An ``AsyncConnectionPool`` whose every reconnection attempt backs off to :data:`RECONNECT_CEILING` at
    most. The pool starts an attempt in ``_add_connection`` (and passes it on to each retry), so giving it a
    capped one there caps every try; ``reconnect_timeout`` still bounds how long one attempt goes on."""

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        await super()._add_connection(attempt or CappedAttempt(timeout=self.reconnect_timeout), growing=growing)
