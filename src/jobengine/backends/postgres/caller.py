"""A caller's own connection for a transactional enqueue: async as it is, or sync behind the async calls the
insert path makes.

A sync ``psycopg.Connection`` (a SQLAlchemy ``Session``'s, Django's) belongs to a thread that is blocked
waiting for the enqueue. Its statements run in worker threads (``asyncio.to_thread``) so that one waiting on
a lock (a parent job's row, a taken idempotency key) never stalls the event loop the store's pool and
notifier live on; psycopg's connection lock keeps them in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import psycopg
from psycopg.rows import RowFactory, tuple_row

from jobengine.backends.postgres.mixin import Conn


def caller_connection(connection: object) -> Conn:
    """``connection`` as the insert path uses it: a ``psycopg.AsyncConnection`` as it is, a sync
    ``psycopg.Connection`` behind :class:`SyncCaller`. Anything else is a TypeError naming what is needed."""
    if isinstance(connection, psycopg.AsyncConnection):
        return connection
    if isinstance(connection, psycopg.Connection):
        # The insert path calls only what SyncCaller has (cursor, execute, transaction, autocommit, info).
        return cast("Conn", SyncCaller(connection))
    raise TypeError(f"connection: needs a psycopg.AsyncConnection or psycopg.Connection, not {type(connection)!r}")


class SyncCaller:
    """A sync ``psycopg.Connection`` with the async methods the insert path calls; each statement runs in a
    worker thread. Built by :func:`caller_connection`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    @property
    def autocommit(self) -> bool:
        return self._conn.autocommit

    @property
    def info(self) -> psycopg.ConnectionInfo:
        return self._conn.info

    def cursor(self, *, row_factory: RowFactory[Any] = tuple_row) -> SyncCallerCursor:
        return SyncCallerCursor(self._conn.cursor(row_factory=row_factory))

    async def execute(self, query: Any, params: Any = None) -> SyncCallerCursor:
        cur = self.cursor()
        await cur.execute(query, params)
        return cur

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A savepoint (or the transaction, when none is open) around the block, as psycopg's own."""
        tx = self._conn.transaction()
        await asyncio.to_thread(tx.__enter__)
        try:
            yield
        except BaseException as exc:
            if not await asyncio.to_thread(tx.__exit__, type(exc), exc, exc.__traceback__):
                raise
        else:
            await asyncio.to_thread(tx.__exit__, None, None, None)


class SyncCallerCursor:
    """A sync cursor's execute in a worker thread; fetching reads what execute already received."""

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    async def execute(self, query: Any, params: Any = None) -> SyncCallerCursor:
        await asyncio.to_thread(self._cur.execute, query, params)
        return self

    async def fetchone(self) -> Any:
        return self._cur.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cur.fetchall()
