"""The webhook store on SQLite: :mod:`jobengine.backends.webhooks_sql` on the store's own thread and
connection (writes in ``BEGIN IMMEDIATE`` at ``synchronous``, like every operator action)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobengine.backends.webhooks_sql import HOT, WRITE, Dialect, Row, SqlWebhookStore, WebhookSql
from jobengine.secretbox import SecretBox

if TYPE_CHECKING:
    from .store import SqliteStore


class _Tx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, tuple(params)).rowcount


class _Runner:
    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    async def __call__(self, fn: Any, mode: str) -> Any:
        if mode == HOT:
            return await self.store._work(lambda c: fn(_Tx(c)), lambda result: result)
        if mode == WRITE:
            return await self.store._write(lambda c: fn(_Tx(c)))
        return await self.store._read(lambda c: fn(_Tx(c)))


def sqlite_webhook_store(store: SqliteStore, box: SecretBox) -> SqlWebhookStore:
    return SqlWebhookStore(WebhookSql(Dialect(), box), _Runner(store))
