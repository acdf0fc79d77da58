"""Graphs at the node limit: a 10,000-node graph is written in one transaction, so a node the database
refuses at position 9,999 leaves nothing stored; and a large fan-out / fan-in runs to its end.

Running 10,000 nodes to their end takes longer than a test should (tens of seconds on a busy machine), so
the run here has 2,500 nodes; ``python -m bench.graphs`` runs 10,000 (and times their submit)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobengine import JobContext
from jobengine.backends.sql.base import Tx
from jobengine.core.graphs import MAX_NODES, GraphSpec, GraphState
from jobengine.engine import Engine
from jobengine.engine.canvas import chord
from jobengine.errors import InvalidJob
from jobengine.settings import Settings

TIMEOUT = 60.0


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "jobs.db")
    async with Engine.from_settings(Settings(database=database)) as e:
        yield e


async def _rows(engine: Engine) -> dict[str, int]:
    """Rows in each table a graph writes, counted in the database itself."""

    async def op(tx: Tx) -> dict[str, int]:
        out = {}
        for table in ("graphs", "graph_nodes", "jobs"):
            out[table] = int((await tx.rows(f"SELECT count(*) FROM {{s}}{table}"))[0][0])
        return out

    return await engine.graphs.repo.db.read(op)  # type: ignore[attr-defined, no-any-return]


async def test_a_node_refused_at_position_9999_stores_nothing_of_its_graph(engine: Engine) -> None:
    @engine.task
    async def noop(ctx: JobContext, i: int = 0) -> None:
        return None

    taken = (await engine.enqueue_many([engine.new_job("noop", {"i": -1})]))[0]
    good = engine.graphs.spec(chord([noop.s(i) for i in range(MAX_NODES - 1)], noop.s(), name="big"))
    last = good.jobs()[-1]  # the fan-in: written last, after its 9,999 parents
    assert len(good.jobs()) == MAX_NODES
    # Its id is one the jobs table already holds: the database refuses the row (a primary key violation)
    # after the graph row and 9,999 node jobs were written in the same transaction.
    nodes = tuple(replace(n, job=replace(n.job, id=taken.id)) if n.job.id == last.id else n for n in good.nodes)
    bad = GraphSpec(good.name, good.tenant, nodes)
    with pytest.raises(InvalidJob, match="id: a job with this id already exists"):
        await engine.graphs.submit_spec(bad)
    assert await _rows(engine) == {"graphs": 0, "graph_nodes": 0, "jobs": 1}
    assert await engine.graphs.list() == []

    handle = await engine.graphs.submit_spec(good)
    status = await handle.status()
    assert (status.total, status.state, dict(status.counts)) == (
        MAX_NODES,
        GraphState.PENDING,
        {"queued": MAX_NODES - 1, "blocked": 1},
    )
    assert await _rows(engine) == {"graphs": 1, "graph_nodes": MAX_NODES, "jobs": MAX_NODES + 1}


async def test_a_wide_fan_out_fan_in_runs_to_its_end_on_sqlite(tmp_path: Path) -> None:
    n = 2_500
    async with Engine.from_settings(Settings(database=str(tmp_path / "jobs.db"))) as engine:

        @engine.task
        async def noop(ctx: JobContext, i: int = 0) -> int:
            return i

        @engine.task
        async def count(ctx: JobContext) -> int:
            return len(await ctx.parent_results())

        handle = await engine.graphs.submit(chord([noop.s(i) for i in range(n - 1)], count.s(), name="wide"))
        worker = engine.worker()
        running = asyncio.create_task(worker.run())
        try:
            status = await handle.wait(TIMEOUT)
        finally:
            worker.stop()
            async with asyncio.timeout(TIMEOUT):
                await running
        assert (status.state, status.done, status.total) == (GraphState.SUCCEEDED, n, n)
        assert (await handle.results())["count"] == n - 1
