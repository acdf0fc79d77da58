"""Simulation (dry run): the next fire times and the jobs each run would have, and nothing written
(checked by counting the rows of every table, and the events)."""

from __future__ import annotations

import sqlite3

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.engine import Engine
from jobengine.errors import InvalidSchedule
from jobengine.scheduler import PlanContext

from .conftest import T0

pytestmark = pytest.mark.timeout(300)


async def row_counts(engine: Engine) -> dict[str, int]:
    """Rows per table of the engine's database."""
    database = engine.settings.database
    if database.startswith("postgresql"):
        import psycopg

        schema = engine.settings.postgres_schema
        async with await psycopg.AsyncConnection.connect(database) as conn:
            cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
            tables = [r[0] for r in await cur.fetchall()]
            counts = {}
            for t in tables:
                cur = await conn.execute(f'SELECT count(*) FROM "{schema}"."{t}"'.encode())
                row = await cur.fetchone()
                counts[t] = row[0] if row else 0
            return counts
    conn = sqlite3.connect(database)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        conn.close()


async def test_simulation_returns_fire_times_and_jobs_and_writes_nothing(engine: Engine, clock: ManualClock) -> None:
    """Acceptance: for a stored and for a proposed schedule; row counts are the same before and after."""
    seen: list[PlanContext] = []

    @engine.schedules.planner("regions")
    def regions(ctx: PlanContext) -> list[str]:
        seen.append(ctx)
        return ["eu", "us", "ap"]

    template = JobTemplate(task="sync", payload={"full": True}, planner="regions", segment_size=2)
    stored = await engine.schedules.create(
        ScheduleSpec(name="sync", cron="0 */6 * * *", timezone="UTC", template=template, jitter=60)
    )
    before = await row_counts(engine)
    assert before.get("schedules", 1) == 1

    simulation = await engine.schedules.simulate("sync", count=4)
    first = stored.next_fire_at
    assert first is not None
    assert simulation.fire_times == tuple(first + 6 * 3600 * i for i in range(4))
    assert [len(r.jobs) for r in simulation.runs] == [2, 2, 2, 2]
    run = simulation.runs[0]
    assert [j.payload for j in run.jobs] == [
        {"full": True, "items": ["eu", "us"], "segment": 0, "segments": 2},
        {"full": True, "items": ["ap"], "segment": 1, "segments": 2},
    ]
    assert run.items == (2, 1)
    assert all(r.tick <= (j.run_at or 0) < r.tick + 60 for r in simulation.runs for j in r.jobs)  # jitter
    assert seen and all(ctx.dry_run for ctx in seen)

    proposed = ScheduleSpec(name="proposed", every="15m", template=JobTemplate(task="ping", items=()))
    preview = await engine.schedules.simulate(proposed, count=3, after=T0)
    assert preview.fire_times == (T0 + 100, T0 + 1000, T0 + 1900)  # multiples of 900 s since the epoch
    assert all(r.no_work and not r.jobs for r in preview.runs)

    assert await row_counts(engine) == before
    with pytest.raises(InvalidSchedule, match="count"):
        await engine.schedules.simulate("sync", count=0)
