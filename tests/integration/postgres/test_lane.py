"""The store's lane: one connection per event loop that serves calls one at a time, outside the pool.

Calls in sequence share the lane's session once it is connected (in the background: meanwhile the pool
serves); calls that overlap it go to the pool; a call cancelled in the middle of a statement leaves no
statement running and the store usable; a terminated session is replaced; closing the store while a call
uses the lane lets that call finish; a forked child never closes its parent's session.
"""

from __future__ import annotations

import asyncio

import psycopg

from jobengine import aio
from jobengine.backends.postgres import PostgresStore

from .helpers import lane_session, session_pid


async def _sleeping(dsn: str, pid: int) -> None:
    """Until session ``pid`` is running its pg_sleep (a call is in its statement on the lane)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        for _ in range(200):
            cur = await admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'active' AND query LIKE '%%pg_sleep%%'",
                (pid,),
            )
            if await cur.fetchone():
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"session {pid} never ran the call's statement")


async def test_calls_in_sequence_share_one_session_and_overlapping_ones_use_the_pool(store: PostgresStore) -> None:
    first = await lane_session(store)
    assert [await session_pid(store) for _ in range(5)] == [first] * 5
    overlapping = await asyncio.gather(*(session_pid(store, 0.2) for _ in range(3)))
    assert len(set(overlapping)) == 3  # one on the lane, two from the pool, at the same time
    assert first in overlapping
    assert await session_pid(store) == first


async def test_a_call_cancelled_mid_statement_leaves_a_usable_store(store: PostgresStore, postgres_dsn: str) -> None:
    lane = await lane_session(store)
    call = asyncio.create_task(session_pid(store, 30.0))
    await _sleeping(postgres_dsn, lane)
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    # The statement was cancelled on the server (psycopg cancels it), or its session closed: nothing of
    # this database is still sleeping, and the next calls are served.
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        cur = await admin.execute(
            """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'
               AND query LIKE '%%pg_sleep%%' AND pid <> pg_backend_pid()"""
        )
        row = await cur.fetchone()
        assert row is not None and row[0] == 0
    await lane_session(store)


async def test_a_terminated_lane_session_is_replaced(store: PostgresStore, postgres_dsn: str) -> None:
    first = await lane_session(store)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    # A read on a dead session is retried on a fresh one: no error reaches the caller.
    assert await session_pid(store) != first
    assert await lane_session(store) != first


async def test_close_lets_a_call_on_the_lane_finish_then_closes_it(store: PostgresStore, postgres_dsn: str) -> None:
    lane = await lane_session(store)
    call = asyncio.create_task(session_pid(store, 0.5))
    await _sleeping(postgres_dsn, lane)
    await store.close()
    assert await call == lane  # not cut off by the close (a pool closes a connection in use when returned)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        for _ in range(50):
            cur = await admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (lane,))
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the lane's session {lane} is still open after close()")


async def test_a_forked_child_forgets_the_lane_instead_of_closing_the_parents_session(store: PostgresStore) -> None:
    lane_pid = await lane_session(store)
    (lane,) = store._lanes.values()
    conn = lane.conn
    assert conn is not None
    forks = aio._FORKS[0]
    aio._FORKS[0] += 1  # what os.fork() does in the child (os.register_at_fork)
    try:
        lane.drop()
        assert not conn.closed  # the socket is the parent's: not closed, only forgotten
        assert lane.conn is None
    finally:
        aio._FORKS[0] = forks
    lane.conn = conn  # back in the parent: the session was never touched
    assert await session_pid(store) == lane_pid
