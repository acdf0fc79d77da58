"""The store's lane: one connection per event loop that serves calls one at a time, outside the pool.

Calls in sequence share the lane's session; calls that overlap it go to the pool; a call cancelled in the
middle of a statement leaves no statement running and the store usable, and a terminated session is
replaced.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from jobengine.backends.postgres import PostgresStore


async def _pid(store: PostgresStore, sleep: float = 0.0) -> int:
    async def op(conn: psycopg.AsyncConnection[Any]) -> int:
        cur = await conn.execute("SELECT pg_backend_pid(), pg_sleep(%s)", (sleep,))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    return await store._run(op)


async def test_calls_in_sequence_share_one_session_and_overlapping_ones_use_the_pool(store: PostgresStore) -> None:
    first = await _pid(store)
    assert [await _pid(store) for _ in range(5)] == [first] * 5
    overlapping = await asyncio.gather(*(_pid(store, 0.2) for _ in range(3)))
    assert len(set(overlapping)) == 3  # one on the lane, two from the pool, at the same time
    assert first in overlapping
    assert await _pid(store) == first


async def test_a_call_cancelled_mid_statement_leaves_a_usable_store(store: PostgresStore, postgres_dsn: str) -> None:
    await _pid(store)
    call = asyncio.create_task(_pid(store, 30.0))
    await asyncio.sleep(0.2)  # the statement is running on the lane
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
    pids = {await _pid(store) for _ in range(3)}
    assert len(pids) == 1


async def test_a_terminated_lane_session_is_replaced(store: PostgresStore, postgres_dsn: str) -> None:
    first = await _pid(store)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    # A read on a dead session is retried on a fresh one: no error reaches the caller.
    second = await _pid(store)
    assert second != first
    assert await _pid(store) == second


async def test_close_closes_the_lane(store: PostgresStore, postgres_dsn: str) -> None:
    lane = await _pid(store)
    await store.close()
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
        for _ in range(50):
            cur = await admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (lane,))
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the lane's session {lane} is still open after close()")
