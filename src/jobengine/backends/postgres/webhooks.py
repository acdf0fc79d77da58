"""The webhook store on PostgreSQL: :mod:`jobengine.backends.webhooks_sql` on a small synchronous psycopg
pool, each operation one transaction in a worker thread. *Why not the store's async pool*: the SQL is
shared with SQLite, whose operations are synchronous functions of a connection; webhook traffic (a few
statements per delivery) does not need the async pool's throughput. The claim takes ``FOR UPDATE SKIP
LOCKED``, so dispatchers in several processes never lease the same delivery."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from jobengine.backends.postgres import sql
from jobengine.backends.webhooks_sql import Dialect, Row, SqlWebhookStore, WebhookSql
from jobengine.errors import StoreError, StoreUnavailable
from jobengine.secretbox import SecretBox


class _Tx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(text.replace("?", "%s").encode(), tuple(params)).fetchall())

    def run(self, text: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(text.replace("?", "%s").encode(), tuple(params)).rowcount


class _Runner:
    def __init__(self, dsn: str, size: int = 4) -> None:
        self.pool = ConnectionPool(dsn, min_size=0, max_size=size, open=False, timeout=10.0,
                                   name="jobengine-webhooks")  # fmt: skip
        self._opened = False

    def _call(self, fn: Any) -> Any:
        if not self._opened:
            self.pool.open()
            self._opened = True
        try:
            with self.pool.connection() as conn, conn.transaction():
                return fn(_Tx(conn))
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(str(exc)) from exc
        except psycopg.Error as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc

    async def __call__(self, fn: Any, mode: str) -> Any:
        return await asyncio.to_thread(self._call, fn)

    async def close(self) -> None:
        if self._opened:
            await asyncio.to_thread(self.pool.close)
            self._opened = False


def postgres_webhook_store(dsn: str, schema: str, box: SecretBox) -> SqlWebhookStore:
    dialect = Dialect(prefix=sql.prefix(schema), skip_locked=" FOR UPDATE OF d SKIP LOCKED", json_param="?::jsonb",
                      same="IS NOT DISTINCT FROM")  # fmt: skip
    return SqlWebhookStore(WebhookSql(dialect, box), _Runner(dsn))
