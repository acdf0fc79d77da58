"""The SQLite runner of :mod:`jobengine.backends.sql`: each operation on the store's thread and connection,
writes in ``BEGIN IMMEDIATE`` at ``synchronous`` like every operator action."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from jobengine.backends.sql.base import Dialect, Row, Tx, drive
from jobengine.core.models import Event, Inserted, Job, NewEvent, NewJob

from .inserts import insert_jobs
from .rows import append_events, select_jobs

if TYPE_CHECKING:
    from .store import SqliteStore

T = TypeVar("T")
R = TypeVar("R")
DIALECT: Final = Dialect()


class StoreCalls(Protocol):
    """The store as its mixins' methods see it: its ways to run a function on its thread and connection."""

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _work(self, fn: Callable[[sqlite3.Connection], R], then: Callable[[R], T]) -> T: ...

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


class SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.d = DIALECT

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(DIALECT.q(sql), tuple(params)).fetchall())

    async def run(self, sql: str, params: Sequence[Any] = (), *, duplicate: Exception | None = None) -> int:
        try:
            return self.conn.execute(DIALECT.q(sql), tuple(params)).rowcount
        except sqlite3.IntegrityError:
            if duplicate is None:
                raise
            raise duplicate from None

    async def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(DIALECT.q(sql), rows)

    async def jobs(self, where: str, params: Sequence[Any] = ()) -> list[Job]:
        return select_jobs(self.conn, DIALECT.q(where), params)

    async def events(self, events: Sequence[NewEvent], now: float) -> list[Event]:
        return append_events(self.conn, events, now)

    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        return insert_jobs(self.conn, jobs, now, phases)


class SqliteDb:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._store._read(lambda c: drive(fn(SqliteTx(c))))  # type: ignore[arg-type]

    async def write(self, fn: Callable[[Tx], Awaitable[T]], *, retry: bool = True, hot: bool = False) -> T:
        if hot:
            return await self._store._work(lambda c: drive(fn(SqliteTx(c))), same)  # type: ignore[arg-type]
        return await self._store._write(lambda c: drive(fn(SqliteTx(c))))  # type: ignore[arg-type]


def same(value: T) -> T:
    """``then`` of a ``_work`` whose result needs no building after COMMIT."""
    return value
