"""The PostgreSQL Store: many worker processes on many hosts, one system of record.

Usage::

    store = PostgresStore("postgresql://app@db/app", schema="jobengine")
    await store.migrate()
    engine = Engine(store)

Every transition is one statement in the common case (see :mod:`.sql`): claims are ``FOR UPDATE SKIP
LOCKED`` in batches, completions / failures / heartbeats are batches fenced by lease token, and events and
NOTIFY ride in the same statement. Jobs that have dependents take a slower path when they finish, in a
transaction that locks their dependents before deciding (a sibling parent finishing concurrently must be
seen), see :meth:`PostgresStore.complete_jobs`.

Failure policy: driver errors become :class:`StoreError` (:class:`StoreUnavailable` when the database cannot
be reached). A statement that failed because its connection died (restart, ``pg_terminate_backend``), or
that found no connection within the pool's timeout, is retried on a fresh connection when retrying is safe:
every fenced transition, every read, and every insert. An insert's jobs carry ids chosen before its first
try, so a retry first looks for them and returns the batch as committed if the lost try had committed it
(:func:`.insert.recover`): an enqueue never writes a job twice. A pooled connection whose session ended
while idle is never handed out, and each event loop's pool holds at most ``pool_max`` sessions.

Behind a pooler in transaction mode (PgBouncer), ``dsn`` names the pooler and ``direct_dsn`` the server:
every statement the store runs is a transaction of its own or inside one, so it can go through the pooler,
and its connections prepare no statement (a pooled server connection may not hold the one prepared on
another). What needs a session of its own goes to ``direct_dsn``: LISTEN, session advisory locks (leader
election, worker liveness, the migration lock). Usage::

    store = PostgresStore("postgresql://app@pgbouncer:6432/app", direct_dsn="postgresql://app@db:5432/app")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import select
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from jobengine.aio import forks
from jobengine.backends.postgres import sql
from jobengine.backends.postgres.api import PostgresApiMixin
from jobengine.backends.postgres.caller import caller_connection
from jobengine.backends.postgres.changes import DEPENDENTS, GRAPH, STATE, Collect, J, Row, cut_after, job_rows
from jobengine.backends.postgres.coalesce import InsertCoalescer
from jobengine.backends.postgres.db import PgDb
from jobengine.backends.postgres.flow import PostgresFlowMixin
from jobengine.backends.postgres.insert import (
    InsertPlan,
    insert_fast,
    insert_general,
    insert_piped,
    pipes,
    raise_if_id_taken,
    recover,
)
from jobengine.backends.postgres.leader import PostgresLeader
from jobengine.backends.postgres.migrate import migrate
from jobengine.backends.postgres.mixin import session
from jobengine.backends.postgres.notifier import PgNotifier
from jobengine.backends.postgres.outbox import PostgresOutboxMixin
from jobengine.backends.postgres.pool import RECONNECT_CEILING, ReconnectingPool
from jobengine.backends.postgres.reads import PostgresReadsMixin
from jobengine.backends.postgres.rows import encode_rows, event_from_row
from jobengine.backends.postgres.workers import PostgresWorkers
from jobengine.backends.sql.base import unique
from jobengine.backends.sql.keys import SqlKeysMixin
from jobengine.backends.sql.outbox import SqlOutboxMixin
from jobengine.backends.sql.packs import SqlPacksMixin
from jobengine.backends.sql.queues import SqlQueuesMixin
from jobengine.backends.sql.reads import SqlReadsMixin
from jobengine.core import codec
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import (
    Changed,
    Completion,
    FailOutcome,
    Failure,
    Heartbeat,
    Inserted,
    Lease,
    NewJob,
    PhaseUpdate,
    Pruned,
    overall_progress,
)
from jobengine.errors import StoreError, StoreUnavailable
from jobengine.ports.store import Capabilities
from jobengine.ports.watermarks import Watermark

if TYPE_CHECKING:
    from jobengine.backends.sql.graphs import SqlGraphs
    from jobengine.backends.sql.schedules import SqlScheduling
    from jobengine.ports.blobs import BlobStore
    from jobengine.ports.webhooks import WebhookStore
    from jobengine.settings import Settings

log = logging.getLogger("jobengine.postgres")

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]

# Session-ending errors: admin shutdown (pg_terminate_backend), crash shutdown, cannot connect now, and the
# connection-exception class 08. An error without a SQLSTATE is the client's: the socket broke.
_GONE = ("57P01", "57P02", "57P03")
# A backend terminated while idle (or while running our statement, before its commit) reports 57P01 in
# place of the statement's outcome; 57P03 comes before any statement. Either way nothing was committed.
_NOT_RUN = ("57P01", "57P03")


def store_error(exc: psycopg.Error) -> StoreError:
    """The StoreError of a driver error. A missing table or schema is one line that says what to do: its
    usual cause is a database nobody migrated, and the driver's own message spans several lines."""
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        hint = "is the schema migrated? run `jobengine migrate`"
        return StoreError(f"postgres: {exc.diag.message_primary or exc} ({hint})")
    return StoreError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """psycopg's errors as the store's, for a statement run outside :meth:`PostgresStore._run` (which retries):
    a lost or refused connection is StoreUnavailable, the rest what :func:`store_error` makes of them."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(str(exc)) from exc
    except psycopg.Error as exc:
        raise store_error(exc) from exc


def _disconnected(exc: psycopg.OperationalError, conn: Conn) -> bool:
    """Whether ``exc`` means the session is gone (retry on another) rather than the statement failed."""
    state = exc.sqlstate
    return conn.closed or conn.broken or state is None or state in _GONE or state.startswith("08")


def _quiet(conn: Conn) -> bool:
    """Whether an idle connection's socket has nothing to read, without a round trip. A session that the
    server ended (``pg_terminate_backend``, a restart) has sent its last message or closed the socket, which
    makes it readable; an idle session of ours is sent nothing (notifications go to the notifier's own
    connection). A session that ends after this check fails its statement, which :meth:`PostgresStore._run`
    retries."""
    if conn.closed or conn.broken:
        return False
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return False
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    readable, _, _ = select.select([fd], [], [], 0)
    return not readable


def _close_in(
    loop: asyncio.AbstractEventLoop, closer: Callable[[], Coroutine[Any, Any, None]]
) -> concurrent.futures.Future[None]:
    """Run ``closer()`` (a pool's or a connection's close) in its own ``loop`` (running in another thread).
    The coroutine is made in that loop when it gets there: ``run_coroutine_threadsafe`` would make it here,
    and a loop that stops first would leave it never awaited."""
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def finished(task: asyncio.Task[None]) -> None:
        if not done.done():
            done.set_result(None)

    def start() -> None:
        loop.create_task(closer()).add_done_callback(finished)

    loop.call_soon_threadsafe(start)
    return done


#: libpq's status of a session between transactions, as ``pgconn.transaction_status`` gives it.
_IDLE = int(TransactionStatus.IDLE)


class _Lane:
    """A connection of one event loop, outside the pool, that serves the loop's store calls one at a time
    whenever it is free. Taking and returning a pooled connection runs psycopg_pool's locks, conditions and
    checks, a large share of a single-row round trip (docs/decisions/0003-postgres-lane-connection.md);
    taking the lane is a flag. Calls that overlap it (a worker's claim while its completions flush) use the
    pool, and so does every call while the lane connects in the background (no call ever waits for it)."""

    __slots__ = ("backoff", "busy", "closing", "conn", "connecting", "fork", "retry_at")

    def __init__(self) -> None:
        self.conn: Conn | None = None
        self.fork = forks()
        self.busy = False
        self.closing = False  # the store closed while a call used the lane: closed when it returns
        self.connecting: asyncio.Task[None] | None = None
        self.retry_at = 0.0  # after a failed connect, the pool serves alone until then
        self.backoff = 0.0

    def drop(self) -> None:
        """Close the connection at once, without its loop (closed, or not running here): libpq's own close
        of the socket. In a forked child the connection is the parent's: it is only forgotten."""
        if self.conn is not None and not self.conn.closed and self.fork == forks():
            self.conn.pgconn.finish()
        self.conn = None


class PostgresStore(
    SqlKeysMixin,
    SqlQueuesMixin,
    PostgresApiMixin,
    SqlOutboxMixin,
    PostgresOutboxMixin,
    PostgresReadsMixin,
    SqlReadsMixin,
    SqlPacksMixin,
    PostgresFlowMixin,
):
    capabilities = Capabilities(
        shared=True,
        cross_process_notify=True,
        transactional_enqueue=True,
        transactional_outbox=True,
        watermarks=True,
        settled_events=True,
    )

    def __init__(
        self,
        dsn: str,
        *,
        direct_dsn: str | None = None,
        schema: str = "jobengine",
        pool_min: int = 1,
        pool_max: int = 10,
        pool_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        #: Where sessions that must last go (LISTEN, session advisory locks): the server, not a pooler.
        self.direct_dsn = direct_dsn or dsn
        # A pooler in transaction mode may run each transaction on another server connection, where a
        # statement prepared on the last one does not exist.
        self._connect_kwargs: dict[str, Any] = {"autocommit": True}
        if self.direct_dsn != dsn:
            self._connect_kwargs["prepare_threshold"] = None
        self.schema = sql.check_schema(schema)
        #: The NOTIFY channel (one per schema, so two stores in one database do not wake each other).
        self.channel = sql.channel(schema)
        self._q = sql.build(schema)
        q = self._q
        # Planned at every execution, never prepared: statements that join a batch with the jobs table. A
        # prepared statement's generic plan is costed at the table's size when it was made; the jobs table
        # keeps every finished job, so a plan made while it was small (a seq scan and a hash join) got
        # slower with every job until an ANALYZE replaced it. Planned each time, with the batch's size known
        # (sql._rows), they probe the primary key (docs/decisions/0002-postgres-replan-batch-transitions.md).
        self._replan = frozenset((q.complete, q.fail, q.release, q.heartbeat, q.save_phases, q.next_run_at))
        self._pool_min, self._pool_max, self._pool_timeout = pool_min, pool_max, pool_timeout
        # One pool per event loop: an async connection belongs to the loop that opened it, and the engine's
        # synchronous facade runs a loop of its own in another thread.
        self._pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]] = {}
        # Each pool's connections (and the fork they were made in), to end them when the pool's loop closes
        # before the pool does.
        self._pool_conns: dict[asyncio.AbstractEventLoop, weakref.WeakSet[Conn]] = {}
        self._pool_forks: dict[asyncio.AbstractEventLoop, int] = {}
        self._lanes: dict[asyncio.AbstractEventLoop, _Lane] = {}
        self._closed = False  # after close(), a call (a test's drop_schema) goes through a pool, as before
        # Half the pool at most for grouped enqueues: the rest stays for reads and transitions.
        self._coalescer = InsertCoalescer(self._insert_jobs, flushes=max(1, pool_max // 2))
        self.db = PgDb(self)  # the runner of the repositories shared with SQLite
        self._notifier: PgNotifier | None = None
        self._workers: PostgresWorkers | None = None

    # -- plumbing -----------------------------------------------------------------------------------
    async def _pool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            for other in [lp for lp in self._pools if lp.is_closed()]:
                # Its loop is gone, so nothing can await the pool's close: its sessions end here, or they
                # would stay open on the server until the process exits.
                self._pools.pop(other)
                for conn in list(self._pool_conns.pop(other, ())):
                    if not conn.closed and self._pool_forks.get(other, -1) == forks():
                        conn.pgconn.finish()
            conns: weakref.WeakSet[Conn] = weakref.WeakSet()

            async def track(conn: Conn) -> None:
                conns.add(conn)

            pool = ReconnectingPool(
                self.dsn,
                min_size=self._pool_min,
                max_size=self._pool_max,
                timeout=self._pool_timeout,
                kwargs=self._connect_kwargs,
                open=False,
                name=f"jobengine-{self.schema}",
                configure=track,
            )
            self._pools[loop] = pool
            self._pool_conns[loop] = conns
            self._pool_forks[loop] = forks()
            await pool.open()
        return pool

    def _take_lane(self) -> _Lane | None:
        """The running loop's lane, taken (busy); None when it is busy, or not connected yet (then its
        connection is made in the background, and the pool serves this call)."""
        if self._closed:
            return None
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is None:
            for other in [lp for lp in self._lanes if lp.is_closed()]:
                self._lanes.pop(other).drop()
            lane = self._lanes[loop] = _Lane()
        if lane.busy:
            return None
        conn = lane.conn
        if conn is not None and lane.fork == forks() and _quiet(conn):
            lane.busy = True
            return lane
        if conn is not None:
            lane.drop()
        if lane.connecting is None and loop.time() >= lane.retry_at:
            lane.connecting = loop.create_task(self._connect_lane(loop, lane), name="jobengine-pg-lane")
        return None

    async def _connect_lane(self, loop: asyncio.AbstractEventLoop, lane: _Lane) -> None:
        try:
            # Bounded like a pool checkout; the DSN's own connect_timeout applies within it.
            async with asyncio.timeout(self._pool_timeout):
                conn = await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            lane.backoff = min(RECONNECT_CEILING, max(0.5, lane.backoff * 2))
            lane.retry_at = loop.time() + lane.backoff
            log.warning("PostgreSQL lane connection failed (%s); the pool serves, next try in %gs", exc, lane.backoff)
            return
        finally:
            lane.connecting = None
        if self._closed or self._lanes.get(loop) is not lane:
            await conn.close()
            return
        lane.conn, lane.fork, lane.backoff = conn, forks(), 0.0

    @staticmethod
    def _give_lane(lane: _Lane) -> Conn | None:
        """Return the lane; the connection to close when it is left anything but idle (a call cancelled
        mid-statement that psycopg could not bring back, a session gone), or its store closed meanwhile: the
        next call connects again."""
        lane.busy = False
        conn = lane.conn
        if conn is not None and (lane.closing or conn.broken or conn.pgconn.transaction_status != _IDLE):
            lane.conn = None
            return conn
        return None

    async def _checkout(self, pool: AsyncConnectionPool[Any]) -> Conn:
        """A connection of the pool for one store call. A session that ended while idle in the pool is not
        handed out: closed, so that the pool replaces it, and the next one is taken at once. (The pool's own
        ``check`` would wait out a reconnection backoff after each dead one, and after a termination every
        idle one is dead.)"""
        conn: Conn = await pool.getconn()
        for _ in range(self._pool_max):
            if _quiet(conn):
                break
            await conn.close()
            await pool.putconn(conn)
            conn = await pool.getconn()
        return conn

    async def _run(self, op: Callable[[Conn], Awaitable[T]], *, retry: bool = True) -> T:
        """Run ``op`` on a connection (the lane or the pool's), translating driver errors. When the session
        turns out to be gone (its backend was terminated, the server restarted), run it again on a fresh
        connection if ``retry`` (the op is idempotent: every fenced transition and read), or if its
        statement cannot have run (the server reported the termination, SQLSTATE 57P01 / 57P03, instead of
        an outcome)."""
        for attempt in range(3):
            dead = False
            try:
                # The loop's lane when it is free, else one of the pool. Taking the lane is a flag, not an
                # await: most calls of a sequential caller take it, and a context manager's coroutines
                # would cost them more than the flag.
                lane = self._take_lane()
                pool = None
                if lane is not None:
                    conn = lane.conn
                    assert conn is not None
                else:
                    pool = await self._pool()
                    conn = await self._checkout(pool)
                try:
                    return await op(conn)
                except psycopg.OperationalError as exc:
                    dead = _disconnected(exc, conn)
                    raise
                finally:
                    if lane is not None:
                        if (spent := self._give_lane(lane)) is not None:
                            with contextlib.suppress(Exception):
                                await spent.close()
                    else:
                        assert pool is not None
                        await pool.putconn(conn)
            except PoolTimeout as exc:
                # Nothing ran: retried like a lost connection (the pool may be reconnecting after a restart).
                if attempt < 2:
                    log.warning("no PostgreSQL connection within %gs; trying again", self._pool_timeout)
                    continue
                raise StoreUnavailable(f"no PostgreSQL connection within {self._pool_timeout:g}s: {exc}") from exc
            except psycopg.OperationalError as exc:
                if dead and attempt < 2 and (retry or exc.sqlstate in _NOT_RUN):
                    log.warning("PostgreSQL connection lost (%s); retrying on a fresh one", exc)
                    await (await self._pool()).check()  # drop the other idle connections that died with it
                    continue
                raise StoreUnavailable(str(exc)) from exc
            except psycopg.Error as exc:
                raise store_error(exc) from exc
        raise AssertionError("unreachable")

    async def _rows(self, query: bytes, params: Mapping[str, Any], *, retry: bool = True) -> list[Row]:
        prepare = False if query in self._replan else None

        async def op(conn: Conn) -> list[Row]:
            cur = conn.cursor(binary=True)
            await cur.execute(query, params, prepare=prepare)
            return await cur.fetchall()

        return await self._run(op, retry=retry)

    async def _fetch(self, conn: Conn, query: bytes, params: Mapping[str, Any]) -> list[Row]:
        cur = conn.cursor(binary=True, row_factory=tuple_row)
        await cur.execute(query, params, prepare=False if query in self._replan else None)
        return await cur.fetchall()

    # -- lifecycle ----------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        async def op(conn: Conn) -> list[int]:
            return await migrate(conn, self.schema)

        if self.direct_dsn == self.dsn:
            return await self._run(op)
        # Its lock is a session's: behind a pooler, the lock and its unlock could reach different sessions.
        with _translated():
            async with await session(self.direct_dsn) as conn:
                return await op(conn)

    async def close(self) -> None:
        if self._workers is not None:
            await self._workers.close()
        if self._notifier is not None:
            await self._notifier.close()
        loop = asyncio.get_running_loop()
        self._closed = True
        lanes, self._lanes = self._lanes, {}
        pools, self._pools = self._pools, {}
        conns, self._pool_conns = self._pool_conns, {}
        made_in, self._pool_forks = self._pool_forks, {}
        for pool_loop in [lp for lp in pools if lp is not loop and not lp.is_running()]:
            # Its loop is stopped or gone: nothing can await the pool's close there, so its sessions end here.
            del pools[pool_loop]
            for conn in list(conns.get(pool_loop, ())):
                if not conn.closed and made_in.get(pool_loop, -1) == forks():
                    conn.pgconn.finish()
        closers: list[tuple[asyncio.AbstractEventLoop, Callable[[], Coroutine[Any, Any, None]]]] = []
        for lane_loop, lane in lanes.items():
            if lane.connecting is not None and not lane_loop.is_closed():
                lane_loop.call_soon_threadsafe(lane.connecting.cancel)  # or it closes what it connected
            if lane.busy:
                lane.closing = True  # a call is using it: closed when that call returns, as a pool would
            elif lane.conn is None:
                continue
            elif lane_loop is loop or lane_loop.is_running():
                closers.append((lane_loop, lane.conn.close))
            else:
                lane.drop()  # its loop is gone or stopped: nothing can await a close there
        closers += [(pool_loop, pool.close) for pool_loop, pool in pools.items()]
        for owner, closer in closers:
            if owner is loop:
                with contextlib.suppress(Exception):
                    await closer()
            elif owner.is_running():
                # A pool or lane of another loop (the sync facade's) closes in that loop; wait, boundedly.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(10.0):
                        await asyncio.wrap_future(_close_in(owner, closer))

    async def drop_schema(self) -> None:
        """Drop this store's schema with every table in it: all jobs and events are gone (tests, uninstall)."""

        async def op(conn: Conn) -> None:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'.encode())

        await self._run(op)

    def notifier(self) -> PgNotifier:
        if self._notifier is None:
            self._notifier = PgNotifier(self.direct_dsn, self.channel, probe=self._q.any_runnable)
        return self._notifier

    def finished_notifier(self) -> PgNotifier:
        # Every (re)connection wakes once: a job that finished before the LISTEN was in place is re-read.
        return PgNotifier(self.direct_dsn, sql.finished_channel(self.schema), probe=b"SELECT true")

    def workers(self) -> PostgresWorkers:
        """The registry of live workers (:mod:`jobengine.ports.workers`)."""
        if self._workers is None:
            self._workers = PostgresWorkers(self)
        return self._workers

    def leader(self, name: str) -> PostgresLeader:
        """A :class:`PostgresLeader` for ``name`` in this store's schema (its own connection)."""
        return PostgresLeader(self.direct_dsn, name, schema=self.schema)

    def webhook_store(self, settings: Settings) -> WebhookStore:
        """Webhooks in this schema, on the store's pool; secrets sealed with ``secret_keys``, never a key in
        the database."""
        from jobengine.backends.sql.webhooks import SqlWebhookStore
        from jobengine.backends.webhooks import secret_box

        return SqlWebhookStore(self.db, secret_box(settings))

    def blob_store(self, settings: Settings) -> BlobStore:
        """Pack content: by default in this schema's ``pack_blobs`` table, which every host shares."""
        from jobengine.backends.blobs import choose_blob_store
        from jobengine.backends.sql.blobs import SqlBlobStore

        return choose_blob_store(settings, "postgres", lambda: SqlBlobStore(self.db, f"schema {self.schema}"))

    def graphs(self) -> SqlGraphs:
        """Graphs of jobs in this store's schema (:mod:`jobengine.ports.graphs`)."""
        from jobengine.backends.sql.graphs import SqlGraphs

        return SqlGraphs(self.db)

    def scheduling(self) -> SqlScheduling:
        """Schedules, runs and failure signatures in this store's schema (the scheduler's ports)."""
        from jobengine.backends.sql.schedules import SqlScheduling  # a worker never loads it

        return SqlScheduling(self.db)

    # -- transitions --------------------------------------------------------------------------------
    async def insert_jobs(
        self,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        if not jobs:
            return Inserted([], [], [])
        if not watermarks and not any(j.idempotency_key is not None or j.depends_on for j in jobs):
            return await self._coalescer.insert(jobs, now, phases)  # concurrent calls share a statement
        return await self._insert_jobs(jobs, now, phases, watermarks)

    async def _insert_jobs(
        self,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        plan = None if pipes(jobs, watermarks) else InsertPlan.of(jobs, now, phases, watermarks)

        tries = 0

        async def op(conn: Conn) -> Inserted:
            nonlocal tries
            tries += 1
            if tries > 1 and (done := await recover(conn, self._q, jobs, now)) is not None:
                return done  # the try whose answer was lost had committed
            if plan is None:  # a large plain batch: chunks piped in one transaction (each makes its own plan)
                return await insert_piped(conn, self._q, self.channel, jobs, now, phases)
            return await self._insert(conn, plan)

        # Retried like a fenced transition: a retry first looks for the batch by its ids (insert.recover).
        return await self._run(op)

    async def _insert(self, conn: Conn, plan: InsertPlan, *, nested: bool = False) -> Inserted:
        """The fast path, then (a taken idempotency key) the general one. ``nested``: ``conn`` is inside a
        transaction, where a failed statement would spoil the rest: the fast attempt gets a savepoint."""
        if plan.fast:
            try:
                if nested and plan.has_keys:
                    async with conn.transaction():
                        done = await insert_fast(conn, self._q, self.channel, plan)
                else:
                    done = await insert_fast(conn, self._q, self.channel, plan)
            except pg_errors.UniqueViolation as exc:
                raise_if_id_taken(exc)
                if not plan.has_keys:
                    raise
                done = None  # a key was taken concurrently; the general path sorts it out
            if done is not None:
                return done
        return await insert_general(conn, self._q, self.channel, plan)

    async def insert_jobs_in(
        self,
        connection: object,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        """``connection`` is a ``psycopg.AsyncConnection`` or a sync ``psycopg.Connection`` (whose statements
        run in worker threads, see :mod:`.caller`); its transaction is opened here if it is not in
        autocommit mode and has none yet (as its first statement would). On an autocommit connection outside
        a transaction block the jobs are committed at once, like :meth:`insert_jobs`. Usage::

            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                async with conn.transaction():
                    await conn.execute("INSERT INTO orders ...")
                    await store.insert_jobs_in(conn, [NewJob("ship", {"order": 7})], time.time(), [()])
        """
        conn = caller_connection(connection)
        if not jobs:
            return Inserted([], [], [])
        plan = InsertPlan.of(jobs, now, phases, watermarks)
        with _translated():
            if not conn.autocommit and conn.info.transaction_status is TransactionStatus.IDLE:
                # psycopg opens the caller's transaction with its first statement; open it now, or the
                # savepoint below would be a transaction of its own and commit.
                await conn.execute("SELECT 1")
            # A savepoint, so that an error (a taken id or key, an unknown dependency) leaves the caller's
            # transaction as it was.
            async with conn.transaction():
                return await self._insert(conn, plan, nested=True)

    async def insert_jobs_own(
        self,
        conn: Conn,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        """:meth:`insert_jobs_in` inside a transaction this store opened (``conn`` from its pool), for writes
        that go with the jobs (the outbox): an error rolls all of it back, so no savepoint around the jobs,
        two round trips fewer."""
        if not jobs:
            return Inserted([], [], [])
        with _translated():
            return await self._insert(conn, InsertPlan.of(jobs, now, phases, watermarks), nested=True)

    async def fetch_jobs(
        self,
        queues: Sequence[str],
        limit: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed:
        if limit <= 0 or not queues or (tasks is not None and not tasks):
            return Changed()
        params: dict[str, Any] = {
            "limit": limit, "worker": worker, "expires": now + lease_seconds, "now": now,
            "tasks": list(tasks) if tasks is not None else None, "tenant": tenant,
        }  # fmt: skip
        unique = list(dict.fromkeys(queues))
        if len(unique) == 1:
            query, params["queue"] = self._q.claim_one, unique[0]
        else:
            query, params["queues"] = self._q.claim_many, unique
        out = Collect(now)
        out.add(await self._rows(query, params))
        return out.changed()

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_until: float, now: float) -> Heartbeat:
        leases = unique(leases, lambda x: (x.job_id, x.token))
        if not leases:
            return Heartbeat(frozenset(), frozenset())
        rows = await self._rows(
            self._q.heartbeat,
            {"rows": encode_rows([[x.job_id, x.token] for x in leases]), "until": lease_until, "now": now},
        )
        return Heartbeat(frozenset(JobId(r[0]) for r in rows), frozenset(JobId(r[0]) for r in rows if r[1]))

    async def save_phases(self, updates: Sequence[PhaseUpdate], now: float) -> Changed:
        out = Collect(now)
        # A job named twice gets both updates, in order: split the batch where a job repeats.
        chunks: list[list[PhaseUpdate]] = [[]]
        for u in updates:
            if any(x.job_id == u.job_id for x in chunks[-1]):
                chunks.append([])
            chunks[-1].append(u)
        for chunk in chunks:
            if not chunk:
                continue
            rows = [
                [
                    u.job_id,
                    u.token,
                    [p.to_json() for p in u.phases],
                    overall_progress(u.phases),
                    {"phase_event": u.event, **(u.event_data or {})} if u.event else None,
                ]
                for u in chunk
            ]
            params = {"rows": codec.dumps(rows, "phases"), "now": now}  # the codec validates checkpoints
            out.add(await self._rows(self._q.save_phases, params))
        return out.changed()

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        """One statement when no job of the batch has dependents. Otherwise the batch runs in order in one
        transaction (the slow path): after each job with dependents, its blocked dependents are locked, then
        unblocked in a later statement (a fresh snapshot) if all their dependencies succeeded. A sibling
        parent finishing concurrently holds those locks until it commits, so one of the two always sees both
        parents succeeded."""
        items = unique(completions, lambda c: (c.job_id, c.token))
        if not items:
            return Changed()

        def params(batch: Sequence[Completion], all_: bool) -> dict[str, Any]:
            # The codec, not encode_rows: results come from tasks unchecked.
            rows = codec.dumps([[c.job_id, c.token, c.result] for c in batch], "result")
            return {"rows": rows, "now": now, "all": all_}

        settled: list[Changed] = []

        async def step(conn: Conn, chunk: Sequence[Completion]) -> list[list[Row]]:
            rows = await self._fetch(conn, self._q.complete, params(chunk, True))
            out = [rows]
            for parent in [r[J] for r in job_rows(rows) if r[DEPENDENTS]]:
                locked = await self._fetch(conn, self._q.lock_dependents, {"ids": [parent]})
                if locked:
                    unblock = {"ids": [r[0] for r in locked], "now": now, "channel": self.channel}
                    out.append(await self._fetch(conn, self._q.unblock, unblock))
            await self._settle(conn, [r for r in job_rows(rows) if r[DEPENDENTS]], now, settled)
            return out

        return await self._fast_then_in_order(
            self._q.complete, params(items, False), items, lambda c: c.job_id, lambda c: True, step, now, settled
        )

    async def _complete_in(self, conn: Conn, completions: Sequence[Completion], now: float) -> Changed:
        """:meth:`complete_jobs` inside the caller's transaction on ``conn`` (the slow path, in order)."""
        out = Collect(now)
        settled: list[Changed] = []
        for c in unique(completions, lambda c: (c.job_id, c.token)):
            rows = await self._fetch(
                conn,
                self._q.complete,
                {"rows": codec.dumps([[c.job_id, c.token, c.result]], "result"), "now": now, "all": True},
            )
            out.add(rows)
            for parent in [r[J] for r in job_rows(rows) if r[DEPENDENTS]]:
                locked = await self._fetch(conn, self._q.lock_dependents, {"ids": [parent]})
                if locked:
                    unblock = {"ids": [r[0] for r in locked], "now": now, "channel": self.channel}
                    out.add(await self._fetch(conn, self._q.unblock, unblock))
            await self._settle(conn, [r for r in job_rows(rows) if r[DEPENDENTS]], now, settled)
        for changed in settled:
            out.merge(changed)
        return out.changed()

    async def _retry_in(self, conn: Conn, ids: Sequence[JobId], now: float) -> Changed:
        """:meth:`retry_jobs` inside the caller's transaction on ``conn``."""
        out = Collect(now)
        params = {"ids": list(unique(ids, lambda x: x)), "now": now, "tenant": None, "channel": self.channel}
        out.add(await self._fetch(conn, self._q.retry, params))
        return out.changed()

    async def _settle(self, conn: Conn, rows: Sequence[Row], now: float, into: list[Changed]) -> None:
        """In the transaction, after a transition: the graphs of ``rows`` (nodes with dependents that ended)
        queue again what a failure policy lets run (:func:`jobengine.backends.sql.graphs.settle_in`)."""
        graphs = list(dict.fromkeys(r[GRAPH] for r in rows if r[GRAPH] is not None))
        if not graphs:
            return
        from jobengine.backends.postgres.db import PgTx
        from jobengine.backends.sql.graphs import settle_in  # only a graph's nodes need it

        settled = await settle_in(PgTx(conn, self.db), graphs, now)
        if settled.jobs:
            into.append(settled)

    async def fail_jobs(self, failures: Sequence[Failure], now: float) -> Changed:
        """Like :meth:`complete_jobs`: a job with dependents that ends dead or cancelled sends the batch down
        the slow path, which cancels the blocked dependents of each such job before the next job (as the
        parity oracle does), one statement per job with dependents in the cascade."""
        items = unique(failures, lambda f: (f.job_id, f.token))
        if not items:
            return Changed()

        def params(batch: Sequence[Failure], all_: bool) -> dict[str, Any]:
            rows = [
                [f.job_id, f.token, f.error.to_json(), f.outcome.value, f.retry_at, f.only_if_expired_at] for f in batch
            ]
            return {"rows": codec.dumps(rows, "error"), "now": now, "all": all_, "channel": self.channel}

        settled: list[Changed] = []

        async def step(conn: Conn, chunk: Sequence[Failure]) -> list[list[Row]]:
            rows = await self._fetch(conn, self._q.fail, params(chunk, True))
            out = [rows]
            broken = [r for r in job_rows(rows) if r[DEPENDENTS] and r[STATE] in ("dead", "cancelled")]
            for r in broken:
                out += await self._cascade(conn, r[J], now)
            await self._settle(conn, broken, now, settled)
            return out

        return await self._fast_then_in_order(
            self._q.fail,
            params(items, False),
            items,
            lambda f: f.job_id,
            lambda f: f.outcome is not FailOutcome.RETRY,
            step,
            now,
            settled,
        )

    async def _fast_then_in_order(
        self,
        fast: bytes,
        fast_params: Mapping[str, Any],
        items: Sequence[T],
        job_of: Callable[[T], JobId],
        may_cascade: Callable[[T], bool],
        step: Callable[[Conn, Sequence[T]], Awaitable[list[list[Row]]]],
        now: float,
        settled: list[Changed],
    ) -> Changed:
        """Try the one-statement path; send what it left (jobs with dependents, stale tokens) through
        ``step`` in a transaction, in batch order, cutting the batch after every job with dependents so
        that its dependents' events follow its own, as in the parity oracle. ``settled``: what the steps
        built already (graph nodes queued again), merged last."""
        out = Collect(now)
        out.add(await self._rows(fast, fast_params))
        done = {j.id for j in out.jobs}
        rest = [x for x in items if job_of(x) not in done]
        if not rest:
            return out.changed()

        async def slow(conn: Conn) -> list[list[Row]]:
            settled.clear()  # a try whose connection was lost committed nothing
            async with conn.transaction():
                ids = [job_of(x) for x in rest]
                parents = {r[0] for r in await self._fetch(conn, self._q.with_dependents, {"ids": ids})}
                results: list[list[Row]] = []
                for chunk in cut_after(rest, lambda x: job_of(x) in parents and may_cascade(x)):
                    results += await step(conn, chunk)
                return results

        for rows in await self._run(slow):
            out.add(rows)
        for changed in settled:
            out.merge(changed)
        return out.changed()

    async def _cascade(self, conn: Conn, root: str, now: float) -> list[list[Row]]:
        """Cancel the blocked dependents of ``root``, transitively, in the parity oracle's order (a stack:
        a job's dependents by id, then the dependents of the last of them first)."""
        levels = []
        stack = [root]
        while stack:
            rows = await self._fetch(conn, self._q.cascade, {"id": stack.pop(), "now": now})
            levels.append(rows)
            stack += [r[J] for r in job_rows(rows) if r[DEPENDENTS]]  # only a job with dependents can cascade further
        return levels

    async def release_jobs(self, leases: Sequence[Lease], now: float) -> Changed:
        leases = unique(leases, lambda x: (x.job_id, x.token))
        if not leases:
            return Changed()
        out = Collect(now)
        params = {"rows": encode_rows([[x.job_id, x.token] for x in leases]), "now": now, "channel": self.channel}
        out.add(await self._rows(self._q.release, params))
        return out.changed()

    async def cancel_jobs(self, ids: Sequence[JobId], reason: str, now: float, tenant: str | None = None) -> Changed:
        ids = unique(ids, lambda x: x)
        if not ids:
            return Changed()
        out = Collect(now)

        settled: list[Changed] = []

        async def op(conn: Conn) -> list[list[Row]]:
            settled.clear()
            async with conn.transaction():
                # The ids are cancelled in order, each cascading before the next (so a dependent named after
                # its parent ends "dependency ... ended cancelled", as in the parity oracle): the batch is
                # cut after every job that has dependents.
                parents = {r[0] for r in await self._fetch(conn, self._q.with_dependents, {"ids": list(ids)})}
                out: list[list[Row]] = []
                for chunk in cut_after(ids, lambda x: x in parents):
                    params = {"ids": list(chunk), "reason": reason, "now": now, "tenant": tenant}
                    rows = await self._fetch(conn, self._q.cancel, params)
                    changed = {r[J] for r in job_rows(rows)}
                    if missing := [x for x in chunk if x not in changed]:
                        # A job claimed while we waited for its row was deleted and inserted again as running
                        # (see sql.CLAIM_ONE): this statement's snapshot shows it, a new one finds it.
                        rows += await self._fetch(conn, self._q.cancel, {**params, "ids": missing})
                    out.append(rows)
                    broken = [r for r in job_rows(rows) if r[DEPENDENTS] and r[STATE] == "cancelled"]
                    for r in broken:
                        out += await self._cascade(conn, r[J], now)
                    await self._settle(conn, broken, now, settled)
                return out

        for rows in await self._run(op):
            out.add(rows)
        for changed in settled:
            out.merge(changed)
        return out.changed()

    async def retry_jobs(self, ids: Sequence[JobId], now: float, tenant: str | None = None) -> Changed:
        ids = unique(ids, lambda x: x)
        if not ids:
            return Changed()
        out = Collect(now)
        params = {"ids": list(ids), "now": now, "tenant": tenant, "channel": self.channel}
        out.add(await self._rows(self._q.retry, params))
        return out.changed()

    async def prune_jobs(self, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
        if limit <= 0:
            return Pruned(0, 0, [])
        params = {"stale_before": stale_before, "delete_before": delete_before, "now": now, "limit": limit}
        events = [event_from_row(r) for r in await self._rows(self._q.prune, params)]
        deleted = sum(1 for e in events if e.type == "job.deleted")
        return Pruned(staled=len(events) - deleted, deleted=deleted, events=events)
