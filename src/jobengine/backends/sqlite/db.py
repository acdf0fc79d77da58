"""The SQLite runner of :mod:`jobengine.backends.sql`: each operation on the store's thread and connection,
writes in ``BEGIN IMMEDIATE`` at ``synchronous`` like every operator action."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from jobengine.backends.sql.base import Dialect, Row, Tx, drive

if TYPE_CHECKING:
    from .store import SqliteStore

T = TypeVar("T")
DIALECT: Final = Dialect()


class SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.d = DIALECT

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(DIALECT.q(sql), tuple(params)).fetchall())

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(DIALECT.q(sql), tuple(params)).rowcount


class SqliteDb:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._store._read(lambda c: drive(fn(SqliteTx(c))))  # type: ignore[arg-type]

    async def write(self, fn: Callable[[Tx], Awaitable[T]], *, retry: bool = True) -> T:
        return await self._store._write(lambda c: drive(fn(SqliteTx(c))))  # type: ignore[arg-type]
