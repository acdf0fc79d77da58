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


#: How long the server keeps a session whose client went silent (no keepalive answered, no data
#: acknowledged): after this its session locks are free. Shorter than the scheduler's misfire grace, so a
#: leader cut off from the network hands the lead over while the ticks it holds can still fire on time.
SESSION_SILENCE_SECONDS = 5


async def session(dsn: str, connect_timeout: float = 5.0) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection outside the pool, for a session that must last (a LISTEN, a session lock).

    Both ends watch the link while no query runs. The client's keepalives make the kernel notice a server
    gone without closing the socket within ~25 s. The server is asked to drop the session once the client
    has been silent for ``SESSION_SILENCE_SECONDS`` (keepalives unanswered, or data unacknowledged): a
    process cut off by a partition never closes its socket, and without this the server would keep its
    session, and with it a leader's lock or a worker's liveness, for hours (the kernel's default).
    A server that refuses the settings (a pooler in front of it) keeps its own; the session still works.
    """
    conn = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout)),
        keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
    )  # fmt: skip
    idle = 2
    probes = SESSION_SILENCE_SECONDS - idle  # one a second after the first
    try:
        await conn.execute(
            "SELECT set_config('tcp_keepalives_idle', %s, false), set_config('tcp_keepalives_interval', '1', false),"
            " set_config('tcp_keepalives_count', %s, false), set_config('tcp_user_timeout', %s, false)",
            (str(idle), str(probes), str(SESSION_SILENCE_SECONDS * 1000)),
        )
    except psycopg.Error:
        if conn.broken:
            await conn.close()
            raise
    except BaseException:  # cancelled while asking (a close during the connect): nobody else would close it
        await conn.close()
        raise
    return conn


def qualify(store: StoreCalls, text: str) -> bytes:
    """``text`` with ``{s}`` naming the store's schema, encoded as psycopg prepares it."""
    return text.replace("{s}", prefix(store.schema)).encode()
