"""Leader election through a session advisory lock: one leader; losing its connection loses leadership."""

from __future__ import annotations

import asyncio

import psycopg

from jobengine.backends.postgres import PostgresLeader, PostgresStore
from jobengine.ports.leader import Leader


async def _terminate(dsn: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def _backend_pid(leader: PostgresLeader) -> int:
    conn = leader._conn
    assert conn is not None
    return conn.info.backend_pid


async def test_two_contenders_one_leader_and_failover_when_its_backend_dies(
    store: PostgresStore, postgres_dsn: str
) -> None:
    a, b = store.leader("maintenance"), store.leader("maintenance")
    port: Leader = a  # the Leader port, structurally
    assert port.name == "maintenance"
    try:
        assert await a.try_acquire() is True
        assert await b.try_acquire() is False
        assert await a.try_acquire() is True  # idempotent while held
        assert await b.try_acquire() is False

        await _terminate(postgres_dsn, await _backend_pid(a))
        await asyncio.sleep(0.1)
        # The lock went with the session: b takes over, and a notices on its next call.
        assert await b.try_acquire() is True
        assert await a.try_acquire() is False
        assert a.leading is False and b.leading is True
    finally:
        await a.release()
        await b.release()


async def test_release_hands_leadership_over(store: PostgresStore) -> None:
    a, b = store.leader("retention"), store.leader("retention")
    try:
        assert await a.try_acquire() is True
        assert await b.try_acquire() is False
        await a.release()
        await a.release()  # idempotent
        assert await b.try_acquire() is True
        assert await a.try_acquire() is False
    finally:
        await a.release()
        await b.release()


async def test_names_and_schemas_are_separate_elections(store: PostgresStore, postgres_dsn: str) -> None:
    leaders = [
        store.leader("rescuer"),
        store.leader("scheduler"),
        PostgresLeader(postgres_dsn, "rescuer", schema="other"),
    ]
    try:
        assert [await x.try_acquire() for x in leaders] == [True, True, True]
    finally:
        for x in leaders:
            await x.release()


async def test_an_unreachable_database_means_not_leader() -> None:
    leader = PostgresLeader("postgresql://postgres@127.0.0.1:1/none", "x", connect_timeout=1)
    assert await leader.try_acquire() is False
    await leader.release()
