"""Enqueue inside a SQLAlchemy transaction: the jobs are written on the session's own connection, so they
commit with its rows, and a rollback leaves no job.

The job store must be the same PostgreSQL database as the session, reached through SQLAlchemy's psycopg
(version 3) driver (``postgresql+psycopg://``). Usage::

    from jobengine.integrations.sqlalchemy import connection_of

    async with async_session.begin() as session:           # AsyncSession
        session.add(Order(id=7))
        await ship_order.options(connection=await connection_of(session)).enqueue(7)

    with sync_session.begin() as session:                  # Session
        session.add(Order(id=8))
        engine.enqueue_sync("ship_order", {"order_id": 8}, connection=connection_of_sync(session))

Workers are woken when the transaction commits (the store's NOTIFY; with a Redis or NATS transport, the
outbox rows written with the jobs are relayed once committed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobengine.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session


async def connection_of(bind: AsyncSession | AsyncConnection) -> Any:
    """The ``psycopg.AsyncConnection`` under ``bind``'s transaction (begun here if it has none yet), for
    ``connection=`` of :meth:`Engine.enqueue` or a task's ``options``. ConfigError when the session does not
    use the psycopg driver. Usage::

        await engine.enqueue("ship_order", {"order_id": 7}, connection=await connection_of(session))
    """
    from sqlalchemy.ext.asyncio import AsyncSession

    conn = await bind.connection() if isinstance(bind, AsyncSession) else bind
    raw = (await conn.get_raw_connection()).driver_connection
    return _checked(raw, conn.dialect.name, conn.dialect.driver, asynchronous=True)


def connection_of_sync(bind: Session | Connection) -> Any:
    """The ``psycopg.Connection`` under ``bind``'s transaction (begun here if it has none yet), for
    ``connection=`` of :meth:`Engine.enqueue_sync` or a task's ``options``. ConfigError when the session
    does not use the psycopg driver. Usage::

        send_receipt.options(connection=connection_of_sync(session)).enqueue_sync(order.id)
    """
    from sqlalchemy.orm import Session

    conn = bind.connection() if isinstance(bind, Session) else bind
    raw = conn.connection.driver_connection
    return _checked(raw, conn.dialect.name, conn.dialect.driver, asynchronous=False)


def _checked(raw: object, dialect: str, driver: str, *, asynchronous: bool) -> Any:
    try:
        import psycopg
    except ImportError:
        psycopg = None  # type: ignore[assignment]
    wanted = (psycopg.AsyncConnection if asynchronous else psycopg.Connection) if psycopg is not None else None
    if wanted is None or not isinstance(raw, wanted):
        raise ConfigError(
            f"connection: enqueueing in a SQLAlchemy transaction needs the postgresql+psycopg driver, "
            f"not {dialect}+{driver}"
        )
    return raw
