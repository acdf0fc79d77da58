"""The SQLite runner of :mod:`jobengine.backends.sql`: each operation on the store's thread and connection,
writes in ``BEGIN IMMEDIATE`` at ``synchronous`` like every operator action."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from jobengine.backends.sql.base import Dialect, Row, Tx, drive
from jobengine.backends.sql.graphs import ended_graphs, settle_in
from jobengine.core.ids import JobId
from jobengine.core.models import Changed, Completion, Event, Failure, Inserted, Job, NewEvent, NewJob

from . import fenced, writes
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

    async def _write_together(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

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

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        return fenced.succeeded(succeed(self.conn, completions, now), now)

    async def retry_jobs(self, ids: Sequence[JobId], now: float) -> Changed:
        return writes.retry_jobs(self.conn, ids, now, None)

    async def add_edges(self, edges: Sequence[tuple[JobId, JobId]]) -> None:
        by_child: dict[str, list[str]] = {}
        for child, parent in edges:
            by_child.setdefault(child, []).append(parent)
        rows: list[tuple[str, int, str]] = []
        for node, parents in by_child.items():
            (last,) = self.conn.execute(
                "SELECT coalesce(max(position), -1) FROM job_deps WHERE job_id = ?", (node,)
            ).fetchone()
            rows += [(node, last + 1 + i, parent) for i, parent in enumerate(parents)]
        self.conn.executemany("INSERT INTO job_deps (job_id, position, depends_on) VALUES (?, ?, ?)", rows)


# -- transitions that settle graphs in their transaction (jobengine.backends.sql.graphs.settle_in) -------------


def settle_graphs(conn: sqlite3.Connection, applied: fenced.Applied, rows: Iterable[Row], now: float) -> None:
    """In the transaction, after a transition: the graphs of ``rows`` (nodes with dependents that ended)
    queue again what a failure policy lets run; kept on ``applied`` for the part after COMMIT."""
    graphs = list(dict.fromkeys(r[fenced.GRAPH] for r in rows if r[fenced.GRAPH] is not None))
    if graphs:
        settled = drive(settle_in(SqliteTx(conn), graphs, now))
        if settled.jobs:
            applied.settled = settled


def succeed(conn: sqlite3.Connection, completions: Sequence[Completion], now: float) -> fenced.Applied:
    """:func:`fenced.succeed`, then the graphs of the nodes with dependents that succeeded settled."""
    applied = fenced.succeed(conn, completions, now)
    settle_graphs(conn, applied, (r for r in applied.rows if r[fenced.DEPENDENTS]), now)
    return applied


def fail(conn: sqlite3.Connection, failures: Sequence[Failure], now: float) -> fenced.Applied:
    """:func:`fenced.fail`, then the graphs of the nodes that cancelled their dependents settled."""
    applied = fenced.fail(conn, failures, now)
    if applied.cascades:
        settle_graphs(conn, applied, (r for r in applied.rows if r[0] in applied.cascades), now)
    return applied


def cancel_jobs(conn: sqlite3.Connection, ids: Sequence[JobId], reason: str, now: float, tenant: str | None) -> Changed:
    """:func:`writes.cancel_jobs`, then the graphs of the nodes with dependents it cancelled settled."""
    changed = writes.cancel_jobs(conn, ids, reason, now, tenant)
    graphs = ended_graphs(j for j in changed.jobs if j.has_dependents)
    if not graphs:
        return changed
    settled = drive(settle_in(SqliteTx(conn), graphs, now))
    return changed.then(settled)


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
