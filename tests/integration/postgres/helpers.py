"""Helpers of the PostgreSQL integration tests: which session (backend pid) serves the store's calls."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from jobengine.backends.postgres import PostgresStore


async def session_pid(store: PostgresStore, sleep: float = 0.0) -> int:
    async def op(conn: psycopg.AsyncConnection[Any]) -> int:
        cur = await conn.execute("SELECT pg_backend_pid(), pg_sleep(%s)", (sleep,))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    return await store._run(op)


async def lane_session(store: PostgresStore) -> int:
    """Call until two calls in a row share a session (the lane, connected), and return it."""
    last = await session_pid(store)
    for _ in range(100):
        await asyncio.sleep(0.02)
        pid = await session_pid(store)
        if pid == last:
            return pid
        last = pid
    raise AssertionError("the lane never served two calls in a row")
