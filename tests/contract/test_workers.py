"""The registry of live workers (jobengine.ports.workers): rows, beats, and liveness that ends with the process.

A worker's liveness is held by its store object (a session's advisory lock on PostgreSQL, a flock on SQLite).
A second store object on the same database stands for another process; closing the first one's registry
without unregistering is what a process's death does to its liveness.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from jobengine.core.ids import WorkerId
from jobengine.core.models import NewJob
from jobengine.fleet import local_worker, new_lock_key
from jobengine.ports.store import Store
from jobengine.ports.workers import WorkerInfo

from .helpers import LEASE, T0, claim, enqueue

#: The PostgreSQL registry believes a free lock only after seeing it free this long (a session that
#: reconnects at once is not dead); the test waits for it.
GRACE_WAIT = 30.0


def _worker(name: str, *, tasks: tuple[str, ...] = ("a", "b"), remote: bool = False) -> WorkerInfo:
    info = local_worker(WorkerId(name), ("default",), tasks, concurrency=4)
    info = replace(info, started_at=T0, last_seen=T0, expires_at=T0 + LEASE)
    return replace(info, kind="remote", lock_key=None) if remote else info


@asynccontextmanager
async def _other_process(store: Store) -> AsyncIterator[Store]:
    """A second store object on the same database, as another process has."""
    from jobengine.backends.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        other: Store = SqliteStore(store.path)
    else:
        from jobengine.backends.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        other = PostgresStore(store.dsn, direct_dsn=store.direct_dsn, schema=store.schema, pool_max=2)
    try:
        yield other
    finally:
        await other.close()


async def _dead_ids(store: Store, now: float, *, until: float = GRACE_WAIT) -> set[str]:
    """The dead workers ``store`` sees, asked until some are found or ``until`` seconds passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + until
    while True:
        dead = {w.id for w in await store.workers().dead(now)}
        if dead or loop.time() >= deadline:
            return dead
        await asyncio.sleep(0.1)


async def _lock_let_go(store: Store, info: WorkerInfo) -> None:
    """Waits until no session holds ``info``'s liveness lock: a client's close returns before the server
    process of its session has exited, and that process holds the lock until it does. The wait is the
    server's: a lock taken for one transaction (given back at its commit) is granted once the holder is gone."""
    from jobengine.backends.postgres import PostgresStore

    if not isinstance(store, PostgresStore) or info.lock_key is None:
        return  # a flock is let go by the close itself
    import psycopg

    async with await psycopg.AsyncConnection.connect(store.direct_dsn, autocommit=True) as conn:
        await conn.execute("SET statement_timeout = '30s'")
        await conn.execute("SELECT pg_advisory_xact_lock(%s::int8)", (info.lock_key,))


async def test_a_registered_worker_is_listed_with_what_it_runs_and_holds(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("w1", tasks=("b", "a")))
    await registry.register(_worker("w2", remote=True))
    (job,) = await enqueue(store, NewJob(task="a"))
    await claim(store, worker="w1")
    live = {w.id: w for w in await registry.live(T0 + 1)}
    assert set(live) == {"w1", "w2"}
    assert live[WorkerId("w1")].tasks == ("a", "b") and live[WorkerId("w1")].kind == "local"
    assert live[WorkerId("w1")].in_flight == 1 and live[WorkerId("w2")].in_flight == 0
    assert live[WorkerId("w2")].lock_key is None
    assert [j.id for j in await registry.held_jobs([WorkerId("w1")], 10)] == [job.id]
    assert await registry.held_jobs([WorkerId("w2")], 10) == []


async def test_a_worker_past_its_expiry_is_not_listed_until_it_beats(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("w1"))
    assert await registry.live(T0 + LEASE + 1) == []
    assert await registry.beat(WorkerId("w1"), T0 + LEASE, T0 + 2 * LEASE)
    assert [w.id for w in await registry.live(T0 + LEASE + 1)] == ["w1"]
    assert not await registry.beat(WorkerId("nobody"), T0, T0 + LEASE)


async def test_registering_again_keeps_the_start_time(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("w1", remote=True))
    await registry.register(replace(_worker("w1", remote=True), started_at=T0 + 50, tasks=("c",)))
    (w,) = await registry.live(T0 + 1)
    assert w.started_at == T0 and w.tasks == ("c",)


async def test_an_unregistered_worker_is_gone(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("w1"))
    await registry.unregister(WorkerId("w1"))
    assert await registry.live(T0) == []
    assert not await registry.beat(WorkerId("w1"), T0, T0 + LEASE)


async def test_a_remote_worker_is_dead_once_expired_and_a_living_local_one_never(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("remote", remote=True))
    await registry.register(_worker("local"))
    assert await registry.dead(T0 + 1) == []
    # Long past every expiry: the remote row is dead; the local worker's liveness is held, so it is not.
    assert [w.id for w in await registry.dead(T0 + 10 * LEASE)] == ["remote"]
    await registry.remove([WorkerId("remote")])
    assert [w.id for w in await registry.live(T0 + 1)] == ["local"]


@pytest.mark.capability("shared")
async def test_a_worker_whose_process_lives_is_not_dead_to_another_process(store: Store) -> None:
    registry = store.workers()
    await registry.register(_worker("w1"))
    async with _other_process(store) as other:
        await asyncio.sleep(1.5)  # past the PostgreSQL registry's grace: a held lock stays held
        assert await other.workers().dead(T0 + 10 * LEASE) == []
        assert await other.workers().dead(T0 + 10 * LEASE) == []


@pytest.mark.capability("shared")
async def test_a_worker_whose_process_died_is_dead_to_another_process(store: Store) -> None:
    async with _other_process(store) as other:
        await other.workers().register(_worker("w1"))
        await store.workers().register(_worker("w2"))
        assert await store.workers().dead(T0) == []
        await other.workers().close()  # the process is gone: its liveness ends, its row stays
        assert await _dead_ids(store, T0) == {"w1"}
    await store.workers().remove([WorkerId("w1")])
    assert [w.id for w in await store.workers().live(T0)] == ["w2"]


@pytest.mark.capability("shared")
async def test_one_look_by_a_process_that_just_started_finds_a_dead_worker(store: Store) -> None:
    """A process may live a moment only (a worker restarted in a crash loop): its first look decides."""
    info = _worker("w1")
    async with _other_process(store) as other:
        await other.workers().register(info)
        await other.workers().close()
    await _lock_let_go(store, info)
    async with _other_process(store) as newcomer:
        assert {w.id for w in await newcomer.workers().dead(T0)} == {"w1"}


@pytest.mark.capability("shared")
async def test_a_worker_declared_dead_that_registers_again_lives(store: Store) -> None:
    """A worker cut off from the database for a while is declared dead while its process lives. Back, it
    registers again with a fresh liveness key, which it must hold: else it is declared dead again and
    again, and every job it claims is taken from it."""
    async with _other_process(store) as other:
        await other.workers().register(_worker("w1"))
        await store.workers().remove([WorkerId("w1")])  # declared dead by another process: its row is gone
        assert not await other.workers().beat(WorkerId("w1"), T0, T0 + LEASE)
        await other.workers().register(_worker("w1"))  # what the worker runtime does then: a fresh key
        await asyncio.sleep(1.5)  # past the PostgreSQL registry's grace: a held lock stays held
        assert await store.workers().dead(T0 + 10 * LEASE) == []
        assert await store.workers().dead(T0 + 10 * LEASE) == []
        await other.workers().close()  # and its liveness still ends with the process
        assert await _dead_ids(store, T0) == {"w1"}


async def test_liveness_keys_differ() -> None:
    assert len({new_lock_key() for _ in range(1000)}) == 1000
    assert all(0 < k < 2**63 for k in (new_lock_key() for _ in range(100)))
