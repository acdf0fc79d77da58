"""The worker registry on PostgreSQL (table ``workers``, migration 0010; :mod:`jobengine.ports.workers`).

A registered local worker's process holds a session-level advisory lock on the row's ``lock_key``, on a
connection of its own (:class:`_Liveness`). When the process dies its session ends and the lock with it;
:meth:`PostgresWorkers.dead` finds such rows with ``pg_try_advisory_xact_lock``, which takes a free lock for
the statement's transaction only and never waits for a held one.

A session also ends while its process lives: a connection reset, ``pg_terminate_backend``, a server
restart. The worker reconnects and takes its lock again at once, so a lock seen free is only believed
after it has been seen free for ``grace`` seconds (two looks at least that far apart), and none in the first
``RESTART_SETTLE_SECONDS`` after the server started, when every worker is reconnecting at once. A worker that was
declared dead all the same finds its row gone at its next beat: its jobs' leases were taken, and a late
report of theirs is fenced out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from jobengine.backends.postgres.mixin import qualify, session
from jobengine.backends.postgres.pool import RECONNECT_CEILING
from jobengine.backends.sql import workers as shared
from jobengine.core.ids import WorkerId
from jobengine.errors import StoreUnavailable
from jobengine.ports.workers import WorkerInfo

if TYPE_CHECKING:
    from jobengine.backends.postgres.store import PostgresStore

log = logging.getLogger("jobengine.postgres")


#: How long after the server starts a free lock proves nothing: a restart ends every liveness session at
#: once, and each worker takes its lock again only when its reconnection (backing off to
#: ``RECONNECT_CEILING``) gets through, on a host that may be busy. A worker dead meanwhile is found then.
RESTART_SETTLE_SECONDS = 10.0

# A free lock is taken for this statement's transaction only (and given back at its end); a held one is
# not waited for. CASE, evaluated in order: no lock is tried for a worker without one, nor while the server
# has been up for less than the settle time.
_DEAD = f"""SELECT {shared.WORKER_COLUMNS} FROM {{s}}workers
WHERE CASE WHEN lock_key IS NULL THEN expires_at <= %(now)s::float8
    WHEN now() - pg_postmaster_start_time() < make_interval(secs => %(settle)s::float8) THEN false
    ELSE pg_try_advisory_xact_lock(lock_key) END"""


class _Liveness:
    """A connection that holds one worker's advisory lock while the worker lives. A background task waits
    on the connection (a broken session wakes it at once), then connects again and takes the lock again."""

    def __init__(self, dsn: str, key: int) -> None:
        self._dsn = dsn
        self._key = key
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        #: How many times the session was lost and the lock taken again (tests and diagnostics).
        self.restored = 0

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await session(self._dsn)
        try:
            while True:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s::int8)", (self._key,))
                row = await cur.fetchone()
                if row and row[0]:
                    return conn
                # Held: by this worker's previous session, which the server has not noticed is gone yet.
                await asyncio.sleep(0.2)
        except BaseException:
            await conn.close()
            raise

    async def start(self) -> None:
        try:
            self._conn = await self._connect()
        except psycopg.Error as exc:
            raise StoreUnavailable(f"PostgreSQL: taking a worker's liveness lock: {exc}") from exc
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="jobengine-pg-liveness")

    async def _watch(self) -> None:
        backoff = 0.05
        while True:
            conn = self._conn
            try:
                if conn is None:
                    conn = self._conn = await self._connect()
                    self.restored += 1
                    log.warning("worker liveness session restored")
                    backoff = 0.05
                async for _ in conn.notifies():  # returns only by raising: the session is gone
                    pass
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("worker liveness session lost (%s); taking the lock again", exc)
                if self._conn is not None:
                    with contextlib.suppress(Exception):
                        await self._conn.close()
                self._conn = None
                await asyncio.sleep(backoff)
                backoff = min(RECONNECT_CEILING, backoff * 2)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                async with asyncio.timeout(2.0):
                    await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()  # the session ends: the lock is given back
            self._conn = None


class PostgresWorkers(shared.SqlWorkers[_Liveness]):
    """The :class:`~jobengine.ports.workers.WorkerRegistry` of a :class:`PostgresStore`."""

    def __init__(self, store: PostgresStore, *, grace: float = 1.0) -> None:
        super().__init__(store.db)
        self._store = store
        self._grace = grace
        self._suspects: dict[WorkerId, float] = {}  # first seen with its lock free (monotonic)

    async def _hold(self, key: int) -> _Liveness:
        liveness = _Liveness(self._store.direct_dsn, key)
        await liveness.start()
        return liveness

    async def _let_go(self, held: _Liveness, *, leaving: bool) -> None:
        await held.stop()

    async def dead(self, now: float) -> list[WorkerInfo]:
        """Remote workers past their expiry, and workers whose liveness lock is free at two looks ``grace``
        apart (a session that drops and is back within the grace is a live worker reconnecting), once the
        server has been up for ``RESTART_SETTLE_SECONDS`` (after a restart, every lock is free at first). A new
        suspect is looked at again within this call, so the first process to look decides, even one that
        started a moment ago and would not live to make a second pass."""
        params = {"now": now, "settle": RESTART_SETTLE_SECONDS}
        dead, wait = self._judge(await self._store._rows(qualify(self._store, _DEAD), params))
        if wait > 0:
            await asyncio.sleep(wait)
            again, _ = self._judge(await self._store._rows(qualify(self._store, _DEAD), params))
            known = {w.id for w in dead}
            dead += [w for w in again if w.id not in known]
        return dead

    def _judge(self, rows: Sequence[Sequence[Any]]) -> tuple[list[WorkerInfo], float]:
        """The dead among rows whose lock was free, and how long until the youngest suspect's grace ends."""
        seen = time.monotonic()
        dead: list[WorkerInfo] = []
        free: set[WorkerId] = set()
        wait = 0.0
        for info in map(shared.worker_from_row, rows):
            if info.id in self._held:
                continue  # ours, between its session's loss and its return: it lives
            if info.lock_key is None:
                dead.append(info)
                continue
            free.add(info.id)
            first = self._suspects.setdefault(info.id, seen)
            if seen - first >= self._grace:
                dead.append(info)
            else:
                wait = max(wait, first + self._grace - seen)
        self._suspects = {w: t for w, t in self._suspects.items() if w in free}
        return dead, wait

    def _removed(self, workers: Sequence[WorkerId], keys: Sequence[int | None]) -> None:
        for w in workers:
            self._suspects.pop(w, None)
