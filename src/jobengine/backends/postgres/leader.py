"""Leader election with a session advisory lock on a dedicated connection (the Leader port).

Whoever holds ``pg_try_advisory_lock(key)`` leads. PostgreSQL releases a session lock when its session ends,
so a leader that crashes, is partitioned away or has its backend terminated loses leadership with its
connection, and the next ``try_acquire`` of another process takes over. Usage::

    leader = store.leader("maintenance")
    while True:
        if await leader.try_acquire():
            await run_rescuer_and_retention_once()
        await asyncio.sleep(5)

Failure policy: ``try_acquire`` never raises for a database problem; it answers False (not leader) and
reconnects on a later call. A leader confirms on each call that its session is still alive, so it notices
a lost connection within one call period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from jobengine.backends.postgres.migrate import lock_key
from jobengine.backends.postgres.mixin import session

log = logging.getLogger("jobengine.postgres")


class PostgresLeader:
    def __init__(self, dsn: str, name: str, *, schema: str = "jobengine", connect_timeout: float = 5.0) -> None:
        self.name = name
        self._dsn = dsn
        self._key = lock_key("leader", schema, name)
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._leading = False

    @property
    def leading(self) -> bool:
        """What the last :meth:`try_acquire` found (without asking the database again)."""
        return self._leading

    async def try_acquire(self) -> bool:
        try:
            # Bounded: a server that vanished without closing the socket must not hold the caller.
            async with asyncio.timeout(self._connect_timeout * 2):
                conn = await self._connection()
                if self._leading:
                    # Still our session? A query on a terminated backend fails, and the lock went with it.
                    await conn.execute("SELECT 1")
                    return True
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
                row = await cur.fetchone()
                self._leading = bool(row and row[0])
        except (psycopg.Error, OSError, TimeoutError) as exc:
            if self._leading:
                log.warning("leader %s lost its connection (%s); no longer leading", self.name, exc)
            await self._drop()
        return self._leading

    async def release(self) -> None:
        if self._conn is not None and self._leading and not self._conn.closed:
            with contextlib.suppress(psycopg.Error, OSError):
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
        await self._drop()

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            await self._drop()
            self._conn = await session(self._dsn, self._connect_timeout)
        return self._conn

    async def _drop(self) -> None:
        self._leading = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
