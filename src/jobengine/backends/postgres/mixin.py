"""What the store's mixins (api, flow, outbox, packs, reads) need of :class:`PostgresStore`: one Protocol
for their ``self``, and their statements' text in its schema."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import psycopg

from jobengine.backends.postgres.sql import Queries, prefix
from jobengine.backends.sql.base import Db

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Row = tuple[Any, ...]


class StoreCalls(Protocol):
    """The store as a mixin's methods see it: its schema and its two ways to run a statement."""

    schema: str
    _q: Queries

    @property
    def db(self) -> Db: ...

    async def _run(self, op: Callable[[Conn], Awaitable[T]], *, retry: bool = True) -> T: ...

    async def _rows(self, query: bytes, params: Mapping[str, Any], *, retry: bool = True) -> list[Row]: ...


async def session(dsn: str, connect_timeout: float = 5.0) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection outside the pool, for a session that must last (a LISTEN, a session lock).
    Keepalives make the kernel notice a server gone without closing the socket within ~25 s, even while no
    query runs."""
    return await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout)),
        keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
    )  # fmt: skip


def qualify(store: StoreCalls, text: str) -> bytes:
    """``text`` with ``{s}`` naming the store's schema, encoded as psycopg prepares it."""
    return text.replace("{s}", prefix(store.schema)).encode()
