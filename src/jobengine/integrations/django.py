"""Enqueue from Django with its transaction: on Django's own connection when the job store is the same
PostgreSQL database (the jobs commit with the view's rows, a rollback leaves none), otherwise at commit
through ``transaction.on_commit`` (a job store elsewhere: SQLite, another server).

Usage::

    from django.db import transaction
    from jobengine.integrations.django import enqueue

    def checkout(request):
        with transaction.atomic():
            order = Order.objects.create(customer=request.user)
            enqueue(engine, "ship_order", {"order_id": order.pk}, priority=5)

Django's PostgreSQL backend must run on psycopg (version 3) for the first way; the second works with any
Django database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from jobengine.errors import ConfigError

if TYPE_CHECKING:
    from jobengine.core.models import Json
    from jobengine.engine import Engine
    from jobengine.engine.handles import Task

# Hosts that name this machine: a store DSN saying "localhost" and Django saying "127.0.0.1" are one server.
_LOCAL = frozenset({"", "localhost", "127.0.0.1", "::1"})


class EnqueueOptions(TypedDict, total=False):
    """The options of :meth:`Engine.enqueue` that :func:`enqueue` passes on (a typo is a mypy error)."""

    queue: str | None
    priority: int | None
    run_at: float | datetime | None
    delay: float | timedelta | None
    max_attempts: int | None
    idempotency_key: str | None
    depends_on: Sequence[str]
    tenant: str
    timeout: float | None


def enqueue(
    engine: Engine,
    task: str | Task[Any, Any],
    payload: Json = None,
    *,
    using: str = "default",
    same_database: bool | None = None,
    **options: Unpack[EnqueueOptions],
) -> str:
    """Enqueue ``task`` with Django's transaction on database ``using``; returns the job's id.

    ``same_database``: whether the job store is that database; by default it is when the engine's
    ``database`` DSN names the same database, server and port as Django's settings. Then the job is written
    on Django's connection, inside its transaction (outside an ``atomic`` block Django autocommits, and so
    does the job), and bad input raises here. Otherwise the job is built now (its options checked here) and
    stored by ``transaction.on_commit``: not at all on a rollback, at once outside ``atomic``; an error then
    is raised by the commit, after the view's rows are in. Usage::

        with transaction.atomic():
            order = Order.objects.create(total=42)
            job_id = enqueue(engine, "ship_order", {"order_id": order.pk}, delay=60)
    """
    from django.db import transaction

    name = task if isinstance(task, str) else task.name
    if same_database is None:
        same_database = shares_database(engine, using)
    if same_database:
        return engine.enqueue_sync(name, payload, connection=connection_of(using), **options).id
    job = engine.new_job(name, payload, **options)
    transaction.on_commit(lambda: engine.enqueue_many_sync([job]), using=using)
    return job.id


def connection_of(using: str = "default") -> Any:
    """Django's ``psycopg.Connection`` for database ``using`` (connected here if it is not yet), for
    ``connection=`` of :meth:`Engine.enqueue_sync` or a task's ``options``. ConfigError for a database
    that is not PostgreSQL on psycopg 3. Usage::

        with transaction.atomic():
            ship_order.options(connection=connection_of()).enqueue_sync(order.pk)
    """
    from django.db import connections

    conn = connections[using]
    if conn.vendor != "postgresql":
        raise ConfigError(f"using: Django database {using!r} is {conn.vendor}, not PostgreSQL")
    conn.ensure_connection()
    raw = conn.connection
    import psycopg

    if not isinstance(raw, psycopg.Connection):
        raise ConfigError(f"using: Django database {using!r} runs on psycopg2; enqueueing on it needs psycopg 3")
    return raw


def shares_database(engine: Engine, using: str = "default") -> bool:
    """Whether ``engine``'s job store is Django's database ``using``: a PostgreSQL store whose DSN names the
    same database, host and port. A doubt answers False (then :func:`enqueue` uses ``on_commit``, which is
    safe on any database). Usage::

        assert shares_database(engine), "jobs would not commit with the orders"
    """
    from django.db import connections

    dsn = engine.settings.database
    conn = connections[using]
    if conn.vendor != "postgresql" or not dsn.startswith(("postgres://", "postgresql://")):
        return False
    from psycopg.conninfo import conninfo_to_dict

    store = conninfo_to_dict(dsn)
    django = conn.settings_dict
    return bool(store.get("dbname")) and (
        str(store.get("dbname")) == str(django.get("NAME") or "")
        and _host(store.get("host")) == _host(django.get("HOST"))
        and str(store.get("port") or 5432) == str(django.get("PORT") or 5432)
    )


def _host(host: object) -> str:
    name = str(host or "").split(",")[0].lower()
    return "local" if name in _LOCAL or name.startswith("/") else name
