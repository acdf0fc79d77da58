"""Enqueue from Django: on its own connection, in its transaction, when the job store is the same PostgreSQL
database; through ``transaction.on_commit`` when the store is elsewhere (SQLite here). Either way a committed
view's job exists (and runs), a rolled-back view's never does.

Django is configured once per process (its settings cannot change afterwards) with one database for this
module; every test has its own job store schema and its own table. The views run in a thread of their own,
as Django runs a sync view, and close that thread's connections when they end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import NotFound
from jobengine.integrations.django import connection_of, enqueue, shares_database
from jobengine.settings import Settings
from support.services import postgres_database, unavailable, unique_name

pytestmark = pytest.mark.service("postgres")

T = TypeVar("T")


@pytest.fixture(scope="module")
def django_dsn() -> Iterator[str]:
    """The DSN of Django's ``default`` database (configured here on first use in this process)."""
    from django.conf import settings

    if settings.configured:
        unavailable("Django was configured by another module of this process")
    with postgres_database() as dsn:
        rest, name = dsn.rsplit("/", 1)
        host_port = rest.rsplit("@", 1)[1]
        host, port = host_port.rsplit(":", 1)
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": "postgres",
                    "HOST": host, "PORT": port,
                }
            },
            INSTALLED_APPS=[], USE_TZ=True,
        )  # fmt: skip
        import django

        django.setup()
        yield dsn


async def _in_view(fn: Callable[[], T]) -> T:
    """``fn`` in a thread of its own, as Django runs a sync view; that thread's connections closed after."""

    def view() -> T:
        from django.db import connections

        try:
            return fn()
        finally:
            connections.close_all()

    return await asyncio.to_thread(view)


def _table() -> str:
    from django.db import connection

    name = unique_name("orders")
    with connection.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    return name


def _checkout(engine: Engine, table: str, order: int, *, fail: bool) -> str:
    """A view: a row and its job in one ``atomic`` block, which ``fail`` rolls back."""
    from django.db import connection, transaction

    class Refused(Exception):
        pass

    job_id = ""
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute(f"INSERT INTO {table} VALUES (%s)", [order])
            job_id = enqueue(engine, "ship", {"order_id": order}, priority=2)
            if fail:
                raise Refused
    except Refused:
        pass
    return job_id


def _rows(table: str) -> list[int]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f"SELECT id FROM {table} ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def _engine(database: str, ran: list[int]) -> Engine:
    engine = Engine.from_settings(Settings(database=database, postgres_schema=unique_name("dj"), poll_interval=30.0))

    @engine.task
    async def ship(order_id: int) -> int:
        ran.append(order_id)
        return order_id

    return engine


async def test_same_database_the_job_commits_and_rolls_back_with_the_view(django_dsn: str) -> None:
    ran: list[int] = []
    engine = _engine(django_dsn, ran)
    async with engine:
        assert await _in_view(lambda: shares_database(engine))
        table = await _in_view(_table)
        gone = await _in_view(lambda: _checkout(engine, table, 2, fail=True))
        kept = await _in_view(lambda: _checkout(engine, table, 1, fail=False))
        assert await _in_view(lambda: _rows(table)) == [1]
        job = await engine.get_job(kept)
        assert (job.state, job.priority) == (JobState.QUEUED, 2)
        with pytest.raises(NotFound):
            await engine.get_job(gone)
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        try:
            assert (await engine.wait_for(kept, timeout=30.0)).state is JobState.SUCCEEDED
        finally:
            worker.stop()
            await asyncio.wait_for(running, 60)
    assert ran == [1]


async def test_same_database_the_job_is_invisible_until_the_commit(django_dsn: str) -> None:
    engine = _engine(django_dsn, [])

    def view() -> tuple[str, bool]:
        from django.db import transaction

        with transaction.atomic():
            job_id = enqueue(engine, "ship", {"order_id": 3})
            try:  # the store's own connections (the engine's loop) do not see it before the commit
                engine.wait_for_sync(job_id, timeout=0.1)
            except NotFound:
                seen = False
            else:
                seen = True
        return job_id, seen

    async with engine:
        job_id, seen_before = await _in_view(view)
        assert not seen_before
        assert (await engine.get_job(job_id)).state is JobState.QUEUED


async def test_a_task_handle_enqueues_on_djangos_connection(django_dsn: str) -> None:
    engine = _engine(django_dsn, [])

    @engine.task
    async def invoice(order_id: int) -> int:
        return order_id

    def view() -> str:
        from django.db import transaction

        with transaction.atomic():
            return invoice.options(connection=connection_of()).enqueue_sync(11).id

    async with engine:
        job = await engine.get_job(await _in_view(view))
        assert job.payload == {"order_id": 11}


async def test_another_store_enqueues_on_commit(django_dsn: str, tmp_path: Path) -> None:
    ran: list[int] = []
    engine = _engine(str(tmp_path / "jobs.db"), ran)
    async with engine:
        assert not await _in_view(lambda: shares_database(engine))
        table = await _in_view(_table)
        gone = await _in_view(lambda: _checkout(engine, table, 2, fail=True))
        kept = await _in_view(lambda: _checkout(engine, table, 1, fail=False))
        assert await _in_view(lambda: _rows(table)) == [1]
        with pytest.raises(NotFound):
            await engine.get_job(gone)
        job = await engine.get_job(kept)
        assert (job.state, job.payload, job.priority) == (JobState.QUEUED, {"order_id": 1}, 2)


async def test_the_guess_can_be_overridden_and_bad_options_fail_at_the_call(django_dsn: str, tmp_path: Path) -> None:
    from jobengine.errors import InvalidJob

    engine = _engine(django_dsn, [])

    def view() -> str:
        from django.db import transaction

        with transaction.atomic():
            with pytest.raises(InvalidJob, match="priority"):
                enqueue(engine, "ship", {"order_id": 1}, priority=10**9, same_database=False)
            return enqueue(engine, "ship", {"order_id": 1}, same_database=False)

    async with engine:
        job_id = await _in_view(view)
        assert (await engine.get_job(job_id)).state is JobState.QUEUED


def test_shares_database_compares_database_host_and_port(django_dsn: str, tmp_path: Path) -> None:
    from django.db import connections

    rest, name = django_dsn.rsplit("/", 1)
    port = connections["default"].settings_dict["PORT"]
    same = [django_dsn, f"postgresql://postgres@localhost:{port}/{name}"]
    other = [f"{rest}/{name}_other", f"postgresql://postgres@127.0.0.1:{int(port) + 1}/{name}", str(tmp_path / "j.db")]
    assert [shares_database(_engine(dsn, [])) for dsn in same] == [True, True]
    assert [shares_database(_engine(dsn, [])) for dsn in other] == [False, False, False]
