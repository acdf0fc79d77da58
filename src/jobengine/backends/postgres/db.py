"""The PostgreSQL runner of :mod:`jobengine.backends.sql`: each operation on the store's async pool (its
retry and error translation), writes in one transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from jobengine.backends.postgres.mixin import Conn
from jobengine.backends.postgres.sql import prefix
from jobengine.backends.sql.base import Dialect, Row, Tx

if TYPE_CHECKING:
    from .store import PostgresStore

T = TypeVar("T")


class PgTx:
    def __init__(self, conn: Conn, d: Dialect) -> None:
        self.conn = conn
        self.d = d

    def _text(self, sql: str) -> bytes:
        return self.d.q(sql).replace("%", "%%").replace("?", "%s").encode()

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cur = await self.conn.execute(self._text(sql), tuple(params))
        return list(await cur.fetchall()) if cur.description is not None else []

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return (await self.conn.execute(self._text(sql), tuple(params))).rowcount


class PgDb:
    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.d = Dialect(prefix=prefix(store.schema), lock=" FOR UPDATE", native=True)

    async def read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        async def op(conn: Conn) -> T:
            return await fn(PgTx(conn, self.d))

        return await self._store._run(op)

    async def write(self, fn: Callable[[Tx], Awaitable[T]], *, retry: bool = True) -> T:
        async def op(conn: Conn) -> T:
            async with conn.transaction():
                return await fn(PgTx(conn, self.d))

        return await self._store._run(op, retry=retry)
