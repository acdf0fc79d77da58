"""Every way into the engine refuses a dependency on another tenant's job, not only the HTTP API: the
store checks it, so ``Engine.enqueue``, ``enqueue_many`` and a caller's transaction (PostgreSQL) all do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from jobengine.engine import Engine
from jobengine.errors import UnknownDependency
from jobengine.settings import Settings


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    # postgres_dsn skips (fails under CI) without PostgreSQL.
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "jobs.db")
    async with Engine.from_settings(Settings(database=database)) as e:
        yield e


async def test_enqueue_refuses_another_tenants_job_as_a_dependency(engine: Engine) -> None:
    theirs = await engine.enqueue("report", tenant="globex")
    with pytest.raises(UnknownDependency, match=f"depends_on: job '{theirs.id}' does not exist"):
        await engine.enqueue("report", tenant="acme", depends_on=[theirs.id])
    with pytest.raises(UnknownDependency, match=theirs.id):
        await engine.enqueue("report", depends_on=[theirs.id])  # the default tenant is another tenant too
    batch = [engine.new_job("a", tenant="acme"), engine.new_job("b", tenant="acme", depends_on=[theirs.id])]
    with pytest.raises(UnknownDependency, match=theirs.id):
        await engine.enqueue_many(batch)
    assert await engine.get_jobs([j.id for j in batch]) == []
    assert sum((await engine.count_jobs()).values()) == 1

    ours = await engine.enqueue("report", tenant="globex", depends_on=[theirs.id])
    assert ours.depends_on == (theirs.id,)


async def test_a_callers_transaction_refuses_it_too(postgres_dsn: str) -> None:
    async with Engine.from_settings(Settings(database=postgres_dsn)) as engine:
        theirs = await engine.enqueue("report", tenant="globex")
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            with pytest.raises(UnknownDependency, match=theirs.id):
                async with conn.transaction():
                    await engine.enqueue("report", tenant="acme", depends_on=[theirs.id], connection=conn)
        assert sum((await engine.count_jobs()).values()) == 1
