"""The PostgreSQL runner of :mod:`jobengine.backends.sql`: each operation on the store's async pool (its
retry and error translation), writes in one transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from psycopg import errors as pg_errors

from jobengine.backends.postgres.insert import InsertPlan, insert_general
from jobengine.backends.postgres.mixin import Conn
from jobengine.backends.postgres.rows import job_columns, job_from_row
from jobengine.backends.postgres.sql import prefix
from jobengine.backends.sql.base import Dialect, Row, Tx
from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import Changed, Completion, Event, Inserted, Job, NewEvent, NewJob

if TYPE_CHECKING:
    from .store import PostgresStore

T = TypeVar("T")

_JOBS: Final = f"SELECT {job_columns('jobs')} FROM {{s}}jobs jobs WHERE "
_EVENTS: Final = """INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data)
SELECT ?, x.type, x.tenant, x.job_id, x.queue, x.task, x.data::jsonb
FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[]) WITH ORDINALITY
    AS x(type, tenant, job_id, queue, task, data, ord)
ORDER BY x.ord
RETURNING id"""


class PgTx:
    def __init__(self, conn: Conn, db: PgDb) -> None:
        self.conn = conn
        self.d = db.d
        self._store = db._store

    def _text(self, sql: str) -> bytes:
        return self.d.q(sql).replace("%", "%%").replace("?", "%s").encode()

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cur = await self.conn.execute(self._text(sql), tuple(params))
        return list(await cur.fetchall()) if cur.description is not None else []

    async def run(self, sql: str, params: Sequence[Any] = (), *, duplicate: Exception | None = None) -> int:
        try:
            return (await self.conn.execute(self._text(sql), tuple(params))).rowcount
        except pg_errors.UniqueViolation:
            if duplicate is None:
                raise
            raise duplicate from None

    async def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            async with self.conn.cursor() as cur:
                await cur.executemany(self._text(sql), rows)

    async def jobs(self, where: str, params: Sequence[Any] = ()) -> list[Job]:
        return [job_from_row(r) for r in await self.rows(_JOBS + where, params)]

    async def events(self, events: Sequence[NewEvent], now: float) -> list[Event]:
        if not events:
            return []
        columns: list[list[Any]] = [[], [], [], [], [], []]
        for e in events:
            for i, v in enumerate((e.type, e.tenant, e.job_id, e.queue, e.task, codec.dumps(dict(e.data), "event"))):
                columns[i].append(v)
        ids = sorted(r[0] for r in await self.rows(_EVENTS, (now, *columns)))
        return [
            Event(i, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data) for i, e in zip(ids, events, strict=True)
        ]

    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        plan = InsertPlan.of(jobs, now, phases, None)
        return await insert_general(self.conn, self._store._q, self._store.channel, plan)

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        return await self._store._complete_in(self.conn, completions, now)

    async def retry_jobs(self, ids: Sequence[JobId], now: float) -> Changed:
        return await self._store._retry_in(self.conn, ids, now)

    async def add_edges(self, edges: Sequence[tuple[JobId, JobId]]) -> None:
        if not edges:
            return
        await self.run(
            "INSERT INTO {s}job_dependencies (dep_id, job_id) SELECT * FROM unnest(?::text[], ?::text[]) "
            "ON CONFLICT DO NOTHING",
            ([p for _, p in edges], [c for c, _ in edges]),
        )
        by_child: dict[str, list[str]] = {}
        for child, parent in edges:
            by_child.setdefault(child, []).append(parent)
        # One update per child: a fan-in gains all its new parents in one row version.
        await self.many(
            "UPDATE {s}jobs SET depends_on = depends_on || ?::text[] WHERE id = ?",
            [(parents, child) for child, parents in by_child.items()],
        )
        await self.run("UPDATE {s}jobs SET has_dependents = TRUE WHERE id {in_array}", (list({p for _, p in edges}),))


class PgDb:
    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.d = Dialect(prefix=prefix(store.schema), native=True)

    async def read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        async def op(conn: Conn) -> T:
            return await fn(PgTx(conn, self))

        return await self._store._run(op)

    async def write(self, fn: Callable[[Tx], Awaitable[T]], *, retry: bool = True, hot: bool = False) -> T:
        async def op(conn: Conn) -> T:
            async with conn.transaction():
                return await fn(PgTx(conn, self))

        return await self._store._run(op, retry=retry)
