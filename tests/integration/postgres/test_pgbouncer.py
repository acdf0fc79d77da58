"""PostgreSQL behind PgBouncer in transaction pooling mode, with ``database_direct`` set.

Enqueues, claims, heartbeats and completions go through the pooler (which may run each transaction on
another server session, and refuses nothing but shows no prepared statement across them); LISTEN and the
session advisory locks (worker liveness, scheduler leadership) reach the server directly. The two routes are
told apart by ``application_name``, which PgBouncer passes on to the server sessions it lends.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from jobengine.core.runs import RunFilter
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.services import SchedulerService
from jobengine.settings import Settings
from jobengine.worker import JobContext
from support.pgbouncer import Bouncer, pgbouncer

pytestmark = pytest.mark.timeout(300)

JOBS = 500


@pytest.fixture
def bouncer(postgres_dsn: str, tmp_path: Path) -> Iterator[Bouncer]:
    with pgbouncer(postgres_dsn, tmp_path) as running:
        yield running


def _settings(postgres_dsn: str, bouncer: Bouncer, **more: object) -> Settings:
    return Settings(
        database=bouncer.dsn + "?application_name=je-pooled",
        database_direct=postgres_dsn + "?application_name=je-direct",
        **more,  # type: ignore[arg-type]
    )


async def _sessions(postgres_dsn: str, where: str) -> list[tuple[str, str]]:
    """(application_name, query) of this database's server sessions that match ``where``."""
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT a.application_name, a.query FROM pg_stat_activity a "
            f"WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND ({where})"
        )
        return [(str(r[0]), str(r[1])) for r in await cur.fetchall()]


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_jobs_run_once_through_the_pooler_and_sessions_go_direct(postgres_dsn: str, bouncer: Bouncer) -> None:
    engine = Engine.from_settings(_settings(postgres_dsn, bouncer, poll_interval=0.2))
    runs: Counter[str] = Counter()

    @engine.task()
    async def count(ctx: JobContext) -> int:
        runs[ctx.job_id] += 1
        return int(ctx.payload)

    async with engine:
        worker = engine.worker(concurrency=20)
        running = asyncio.create_task(worker.run())
        try:
            # A large batch (piped in chunks), small batches and single enqueues: every insert path.
            jobs = await engine.enqueue_many([engine.new_job("count", i) for i in range(300)])
            for start in range(300, 450, 10):
                jobs += await engine.enqueue_many([engine.new_job("count", i) for i in range(start, start + 10)])
            jobs += [await engine.enqueue("count", i) for i in range(450, JOBS)]

            async def all_succeeded() -> bool:
                counts = await engine.count_jobs()
                return counts.get(("default", JobState.SUCCEEDED), 0) == JOBS

            await _until(all_succeeded, f"{JOBS} jobs to succeed")
            assert runs == Counter({j.id: 1 for j in jobs})
            assert sorted(r.result for r in await engine.get_jobs([j.id for j in jobs])) == list(range(JOBS))

            # The worker's LISTEN and its liveness lock live on direct sessions, none on a pooled one.
            # The worker's LISTEN lives on a direct session: its last statement is the probe that follows
            # the LISTEN (does runnable work exist?), and no pooled session ever ran a LISTEN.
            listens = await _sessions(postgres_dsn, "a.query LIKE 'LISTEN %' OR a.query LIKE 'SELECT EXISTS %'")
            assert listens and {name for name, _ in listens} == {"je-direct"}
            locks = await _sessions(
                postgres_dsn, "a.pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
            )
            assert locks and {name for name, _ in locks} == {"je-direct"}
        finally:
            worker.stop()
            await running
    stats = bouncer.stats(urlsplit(postgres_dsn).path.lstrip("/"))
    # The transitions went through the pooler: at least the claims, each of at most `concurrency` jobs.
    assert int(stats["total_xact_count"]) >= JOBS // 20


async def test_scheduler_leadership_holds_and_hands_over_through_the_pooler(
    postgres_dsn: str, bouncer: Bouncer
) -> None:
    settings = _settings(
        postgres_dsn, bouncer, scheduler_poll_interval=0.2, scheduler_misfire_grace=10.0, postgres_pool_size=3
    )
    async with Engine.from_settings(settings) as a, Engine.from_settings(settings) as b:
        first, second = SchedulerService(a, instance="a"), SchedulerService(b, instance="b")
        await first.start()
        await second.start()
        try:
            await a.schedules.create(ScheduleSpec(name="tick", every=1, template=JobTemplate(task="t")))

            async def runs_at_least(n: int) -> bool:
                return len(await a.runs.list(RunFilter(limit=1000))) >= n

            await _until(lambda: runs_at_least(3), "three ticks")
            assert {first.loop.leading, second.loop.leading} == {True, False}
            # The leader's advisory lock is held by a direct session.
            locks = await _sessions(
                postgres_dsn, "a.pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
            )
            assert locks and {name for name, _ in locks} == {"je-direct"}

            leader, follower = (first, second) if first.loop.leading else (second, first)
            await leader.stop()  # gives the lock up: the other takes over at its next poll
            before = len(await a.runs.list(RunFilter(limit=1000)))
            await _until(lambda: runs_at_least(before + 3), "three ticks after the hand-over")
            assert follower.loop.leading
        finally:
            await first.stop()
            await second.stop()
        ticks = sorted(r.tick for r in await a.runs.list(RunFilter(limit=1000)) if r.tick is not None)
        assert ticks == [ticks[0] + i for i in range(len(ticks))]  # each tick once, none missed
        assert {r.fired_by for r in await a.runs.list(RunFilter(limit=1000))} == {"a", "b"}


async def test_without_a_direct_url_the_store_prepares_statements(postgres_dsn: str, bouncer: Bouncer) -> None:
    """The control: the same store on the pooler but with no ``database_direct`` keeps psycopg's prepared
    statements, which a pooler in transaction mode breaks; the setting is what makes the runs above work."""
    from jobengine.backends.postgres import PostgresStore

    direct = PostgresStore(bouncer.dsn, direct_dsn=postgres_dsn)
    plain = PostgresStore(bouncer.dsn)
    try:
        assert direct.direct_dsn == postgres_dsn and plain.direct_dsn == bouncer.dsn
        await direct.migrate()
        # psycopg prepares a statement from its fifth run on a connection. Calls at once spread over the
        # store's connections, and the pooler lends each transaction whichever server session is free.
        for _ in range(10):
            bounds = await asyncio.gather(*(direct.event_bounds() for _ in range(12)))
            assert set(bounds) == {(0, 0)}
        with pytest.raises(Exception, match="prepared statement"):
            for _ in range(50):
                await asyncio.gather(*(plain.event_bounds() for _ in range(12)))
    finally:
        await direct.close()
        await plain.close()
