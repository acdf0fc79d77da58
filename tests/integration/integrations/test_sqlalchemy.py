"""Enqueue in a SQLAlchemy transaction (async and sync sessions, on PostgreSQL through psycopg): committed,
the job runs with the session's rows; rolled back, neither exists. Also through the Redis transport, where
the job travels by its outbox row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import Integer, String, create_engine, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from jobengine.core.queue_config import QueueConfig, RedisConfig
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import ConfigError, NotFound
from jobengine.integrations.sqlalchemy import connection_of, connection_of_sync
from jobengine.settings import Settings

pytestmark = pytest.mark.service("postgres")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String, default="")


def _url(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def sync_sessions(postgres_dsn: str) -> Iterator[sessionmaker[Session]]:
    db = create_engine(_url(postgres_dsn))
    Base.metadata.create_all(db)
    try:
        yield sessionmaker(db)
    finally:
        db.dispose()


@pytest.fixture
async def async_sessions(sync_sessions: sessionmaker[Session], postgres_dsn: str) -> AsyncIterator[Any]:
    db = create_async_engine(_url(postgres_dsn))
    try:
        yield async_sessionmaker(db)
    finally:
        await db.dispose()


@asynccontextmanager
async def _running(engine: Engine) -> AsyncIterator[dict[int, int]]:
    """The engine started, with a worker running ``ship``; yields what ``ship`` ran (order -> times)."""
    ran: dict[int, int] = {}

    @engine.task
    async def ship(order_id: int) -> int:
        ran[order_id] = ran.get(order_id, 0) + 1
        return order_id

    async with engine:
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        try:
            yield ran
        finally:
            worker.stop()
            await asyncio.wait_for(running, 60)


async def _settles(engine: Engine, job_id: str) -> JobState:
    return (await engine.wait_for(job_id, timeout=30.0)).state


async def test_async_session_commit_runs_the_job_and_rollback_leaves_none(
    postgres_dsn: str, async_sessions: async_sessionmaker[AsyncSession]
) -> None:
    # A 30 s poll: only the NOTIFY sent at commit wakes the worker in time.
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))
    async with _running(engine) as ran:
        async with async_sessions() as session:
            async with session.begin():
                session.add(Order(id=1))
                job = await engine.enqueue("ship", {"order_id": 1}, connection=await connection_of(session))
                assert (await session.get(Order, 1)) is not None
            async with session.begin():
                session.add(Order(id=2))
                gone = await engine.enqueue("ship", {"order_id": 2}, connection=await connection_of(session))
                await session.rollback()
        assert await _settles(engine, job.id) is JobState.SUCCEEDED
        assert ran == {1: 1}
        with pytest.raises(NotFound):
            await engine.get_job(gone.id)
        async with async_sessions() as session:
            assert (await session.scalars(select(Order.id))).all() == [1]


async def test_a_task_handle_enqueues_on_the_sessions_connection(
    postgres_dsn: str, async_sessions: async_sessionmaker[AsyncSession]
) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))

    @engine.task
    async def invoice(order_id: int, copies: int = 1) -> str:
        return f"{order_id}x{copies}"

    async with engine:
        async with async_sessions() as session, session.begin():
            conn = await connection_of(await session.connection())  # an AsyncConnection works as the session
            handle = await invoice.options(connection=conn, priority=3).enqueue(9, copies=2)
            # Not committed: the store's own connections do not see it yet.
            with pytest.raises(NotFound):
                await engine.get_job(handle.id)
        job = await engine.get_job(handle.id)
        assert (job.state, job.priority, job.payload) == (JobState.QUEUED, 3, {"order_id": 9, "copies": 2})


async def test_sync_session_commit_runs_the_job_and_rollback_leaves_none(
    postgres_dsn: str, sync_sessions: sessionmaker[Session]
) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))

    def view() -> tuple[str, str]:
        """What a sync web view does: its own session, the sync facade (the engine's own loop)."""
        with sync_sessions.begin() as session:
            session.add(Order(id=1))
            kept = engine.enqueue_sync("ship", {"order_id": 1}, connection=connection_of_sync(session))
        with sync_sessions() as session, session.begin():
            session.add(Order(id=2))
            conn = connection_of_sync(session.connection())  # a Connection works as the session
            dropped = engine.enqueue_many_sync([engine.new_job("ship", {"order_id": 2})], connection=conn)[0]
            session.rollback()
        return kept.id, dropped.id

    async with _running(engine) as ran:
        kept, dropped = await asyncio.to_thread(view)
        assert await _settles(engine, kept) is JobState.SUCCEEDED
        assert ran == {1: 1}
        with pytest.raises(NotFound):
            await engine.get_job(dropped)
    with sync_sessions() as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 1


async def test_a_failed_enqueue_leaves_the_session_usable(
    postgres_dsn: str, sync_sessions: sessionmaker[Session]
) -> None:
    from jobengine.errors import UnknownDependency

    engine = Engine.from_settings(Settings(database=postgres_dsn))

    def view() -> None:
        with sync_sessions.begin() as session:
            session.add(Order(id=5))
            session.flush()
            with pytest.raises(UnknownDependency):
                engine.enqueue_sync(
                    "ship", {"order_id": 5}, depends_on=["nope"], connection=connection_of_sync(session)
                )
            session.add(Order(id=6))  # the store's savepoint was rolled back, not the session's transaction

    async with engine:
        await asyncio.to_thread(view)
    with sync_sessions() as session:
        assert session.scalars(select(Order.id).order_by(Order.id)).all() == [5, 6]


async def test_a_session_on_another_driver_is_refused(tmp_path: Any) -> None:
    db = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        with Session(db) as session, pytest.raises(ConfigError, match=r"postgresql\+psycopg.*sqlite\+pysqlite"):
            connection_of_sync(session)
    finally:
        db.dispose()


async def test_through_redis_a_committed_enqueue_runs_and_a_rolled_back_one_never(
    postgres_dsn: str, redis_url: str, async_sessions: async_sessionmaker[AsyncSession]
) -> None:
    queue = QueueConfig(kind="redis", redis=RedisConfig(url=redis_url))
    engine = Engine.from_settings(Settings(database=postgres_dsn, queue=queue, poll_interval=30.0))
    async with _running(engine) as ran:
        async with async_sessions() as session:
            async with session.begin():
                session.add(Order(id=2))
                gone = await engine.enqueue("ship", {"order_id": 2}, connection=await connection_of(session))
                await session.rollback()
            async with session.begin():
                session.add(Order(id=1))
                job = await engine.enqueue("ship", {"order_id": 1}, connection=await connection_of(session))
        # The rolled-back job's message, had it been published, would sit in the stream before this one's.
        assert await _settles(engine, job.id) is JobState.SUCCEEDED
        assert ran == {1: 1}
        with pytest.raises(NotFound):
            await engine.get_job(gone.id)
