"""The FastAPI lifespan and dependency: the engine starts with the app (migrating a fresh PostgreSQL
database), routes get it through ``EngineDep``, a worker in the app's process runs what a route enqueued in
its SQLAlchemy transaction, and a rolled-back route's job never exists.

The app's lifespan runs as a server runs it (``app.router.lifespan_context``), the requests go through
httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException
from sqlalchemy import Integer, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jobengine.engine import Engine
from jobengine.errors import ConfigError, NotFound
from jobengine.integrations.fastapi import EngineDep, get_engine, jobengine_lifespan
from jobengine.integrations.sqlalchemy import connection_of
from jobengine.settings import Settings


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)


def _app(engine: Engine, dsn: str) -> FastAPI:
    db = create_async_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    sessions = async_sessionmaker(db)

    @engine.task
    async def ship(order_id: int) -> str:
        return f"shipped {order_id}"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:  # the app's own, around the engine's
        async with db.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        async with jobengine_lifespan(engine, worker=True, concurrency=2)(app):
            yield
        await db.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders/{order_id}")
    async def order(order_id: int, engine: EngineDep, refuse: bool = False) -> dict[str, str]:
        async with sessions() as session, session.begin():
            session.add(Order(id=order_id))
            handle = await ship.options(connection=await connection_of(session)).enqueue(order_id)
            if refuse:
                await session.rollback()
                raise HTTPException(409, detail=handle.id)
        return {"job": handle.id}

    @app.get("/jobs/{job_id}")
    async def result(job_id: str, engine: Annotated[Engine, Depends(get_engine)]) -> dict[str, str]:
        try:
            job = await engine.wait_for(job_id, timeout=30.0)
        except NotFound:
            raise HTTPException(404) from None
        return {"state": job.state, "result": str(job.result)}

    @app.get("/orders")
    async def orders() -> list[int]:
        async with sessions() as session:
            return list((await session.scalars(text("SELECT id FROM orders ORDER BY id"))).all())

    return app


@asynccontextmanager
async def _serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app", timeout=60.0) as client:
            yield client


async def test_the_lifespan_runs_the_engine_and_a_worker_with_the_app(postgres_dsn: str) -> None:
    engine = Engine.from_settings(Settings(database=postgres_dsn, poll_interval=30.0))
    app = _app(engine, postgres_dsn)
    async with _serving(app) as client:
        assert app.state.jobengine is engine
        job = (await client.post("/orders/7")).json()["job"]
        assert (await client.get(f"/jobs/{job}")).json() == {"state": "succeeded", "result": "shipped 7"}
        refused = await client.post("/orders/8", params={"refuse": True})
        assert refused.status_code == 409
        assert (await client.get(f"/jobs/{refused.json()['detail']}")).status_code == 404
        assert (await client.get("/orders")).json() == [7]


async def test_a_route_without_the_lifespan_says_how_to_wire_it() -> None:
    app = FastAPI()

    @app.get("/")
    async def index(engine: EngineDep) -> str:
        return "unreachable"

    async with _serving(app) as client:
        with pytest.raises(RuntimeError, match="jobengine_lifespan"):
            await client.get("/")


async def test_an_unknown_worker_option_fails_the_startup(tmp_path: object) -> None:
    engine = Engine.from_settings(Settings(database=f"{tmp_path}/jobs.db"))
    app = FastAPI(lifespan=jobengine_lifespan(engine, worker=True, concurency=2))
    with pytest.raises(ConfigError, match="concurency"):
        async with _serving(app):
            pass
