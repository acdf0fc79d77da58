"""Graphs of jobs on SQLite and PostgreSQL, run by a real worker: chains, fan-out / fan-in with results
along the edges, failure policies, cancel and retry (the atomic submit of 10,000 nodes:
test_graphs_large.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine import JobContext, NonRetryable, SyncJobContext
from jobengine.core.graphs import MAX_NODES, GraphState
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import Graph, chain, chord, group
from jobengine.errors import IllegalState, InvalidJob, NotFound
from jobengine.settings import Settings

TIMEOUT = 60.0


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "jobs.db")
    async with Engine.from_settings(Settings(database=database, poll_interval=0.05)) as e:
        yield e


class Ledger:
    """What the tasks did, in order, and whether the flaky one fails (a test changes it)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = {"flaky"}


def register(engine: Engine, ledger: Ledger) -> dict[str, object]:
    @engine.task
    async def number(ctx: JobContext, n: int) -> int:
        ledger.calls.append(f"number:{n}")
        return n

    @engine.task
    async def add(ctx: JobContext, n: int) -> int:
        parents = await ctx.parent_results()
        ledger.calls.append("add")
        return sum(int(v) for v in parents.values()) + n

    @engine.task
    async def total(ctx: JobContext) -> dict[str, object]:
        parents = await ctx.parent_results()
        ledger.calls.append("total")
        return {"sum": sum(int(v) for v in parents.values()), "count": len(parents)}

    @engine.task(max_attempts=1)
    async def flaky(ctx: JobContext, n: int) -> int:
        ledger.calls.append("flaky")
        if "flaky" in ledger.fail:
            raise NonRetryable("flaky failed")
        return n

    @engine.task
    async def cleanup(ctx: JobContext) -> list[str]:
        ledger.calls.append("cleanup")
        return sorted((await ctx.parent_results()).keys())

    @engine.task
    async def slow(ctx: JobContext) -> None:
        ledger.calls.append("slow")
        for _ in range(600):
            ctx.raise_if_cancelled()
            await asyncio.sleep(0.05)

    return {"number": number, "add": add, "total": total, "flaky": flaky, "cleanup": cleanup, "slow": slow}


async def _running(engine: Engine) -> asyncio.Task[None]:
    worker = engine.worker(concurrency=8, poll_interval=0.05, heartbeat_every=0.2)
    return asyncio.create_task(worker.run())


async def _stop(engine: Engine, task: asyncio.Task[None]) -> None:
    for w in engine._workers:
        w.stop()
    await asyncio.wait_for(task, TIMEOUT)


async def test_a_chain_passes_each_result_to_the_next_node(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = chain(t["number"].s(1), t["add"].s(10), t["add"].s(100), name="sums")  # type: ignore[attr-defined]
    handle = await engine.graphs.submit(g)
    status = await handle.status()
    assert (status.state, status.done, status.total, status.name) == (GraphState.PENDING, 0, 3, "sums")
    worker = await _running(engine)
    try:
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    assert status.state is GraphState.SUCCEEDED
    assert (status.done, status.total, status.progress) == (3, 3, 1.0)
    assert status.completed_at is not None and status.started_at is not None
    assert await handle.results() == {"number": 1, "add": 11, "add-2": 111}
    assert ledger.calls == ["number:1", "add", "add"]
    events = [e for e in await engine.events(limit=1000) if e.type.startswith("graph.")]
    assert [(e.type, e.data["graph_id"], e.data["state"]) for e in events] == [
        ("graph.completed", handle.id, "succeeded")
    ]


async def test_fan_out_and_in_the_fan_in_sees_all_hundred_results(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = chain(
        t["number"].s(0),  # type: ignore[attr-defined]
        chord([t["add"].s(i) for i in range(1, 101)], t["total"].s()),  # type: ignore[attr-defined]
        name="fan",
    )
    assert len(g) == 102
    handle = await engine.graphs.submit(g)
    worker = await _running(engine)
    try:
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    assert status.state is GraphState.SUCCEEDED, status
    results = await handle.results()
    assert results["total"] == {"sum": sum(range(1, 101)), "count": 100}
    assert ledger.calls.count("total") == 1 and ledger.calls.count("add") == 100


async def test_node_names_name_the_nodes_of_a_batch_and_skip_plain_jobs(engine: Engine) -> None:
    """What a claim of the worker protocol sends with each graph node: its name, read in one batch."""
    t = register(engine, Ledger())
    handle = await engine.graphs.submit(chord([t["number"].s(1), t["number"].s(2)], t["total"].s()))  # type: ignore[attr-defined]
    plain = await engine.enqueue("number", {"n": 3})
    status = await engine.graphs.get(handle.id, nodes=True)
    names = await engine.graphs.node_names([*(n.job for n in status.nodes), plain])
    assert names == {n.job.id: n.name for n in status.nodes} and len(names) == 3
    assert await engine.graphs.node_names([plain]) == {}


async def test_a_failed_node_cancels_its_descendants_by_default(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = Graph("default-policy")
    a = g.add("a", t["flaky"].s(1))  # type: ignore[attr-defined]
    b = g.add("b", t["add"].s(1), after=[a])  # type: ignore[attr-defined]
    g.add("c", t["total"].s(), after=[b])  # type: ignore[attr-defined]
    g.add("side", t["number"].s(7))  # type: ignore[attr-defined]
    handle = await engine.graphs.submit(g)
    worker = await _running(engine)
    try:
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    assert status.state is GraphState.FAILED
    nodes = {n.name: n.job.state for n in (await handle.status(nodes=True)).nodes}
    assert nodes == {"a": JobState.DEAD, "b": JobState.CANCELLED, "c": JobState.CANCELLED, "side": JobState.SUCCEEDED}
    assert "add" not in ledger.calls and "total" not in ledger.calls
    events = [e.type for e in await engine.events(limit=1000) if e.type.startswith("graph.")]
    assert events == ["graph.failed"]


async def test_continue_and_always_policies_run_the_nodes_after_a_failure(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = Graph("policies")
    a = g.add("a", t["flaky"].s(1), policy="continue")  # type: ignore[attr-defined]
    ok = g.add("ok", t["number"].s(5))  # type: ignore[attr-defined]
    b = g.add("b", t["add"].s(1), after=[a, ok])  # type: ignore[attr-defined]
    x = g.add("x", t["flaky"].s(2))  # type: ignore[attr-defined]  # default policy: fails
    y = g.add("y", t["add"].s(0), after=[x])  # type: ignore[attr-defined]  # cancelled by x
    g.add("cleanup", t["cleanup"].s(), after=[b, y], policy="always")  # type: ignore[attr-defined]
    handle = await engine.graphs.submit(g)
    worker = await _running(engine)
    try:
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    nodes = {n.name: n.job for n in (await handle.status(nodes=True)).nodes}
    assert nodes["a"].state is JobState.DEAD
    # b ran although its parent a failed (a continues), with the result of the parent that succeeded.
    assert nodes["b"].state is JobState.SUCCEEDED and nodes["b"].result == 6
    assert nodes["y"].state is JobState.CANCELLED
    # cleanup runs whatever its parents ended as, and sees the one that succeeded.
    assert nodes["cleanup"].state is JobState.SUCCEEDED and nodes["cleanup"].result == ["b"]
    assert status.state is GraphState.FAILED


async def test_cancel_stops_running_nodes_and_cancels_the_rest(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = chain(t["slow"].s(), t["number"].s(1), name="to-cancel")  # type: ignore[attr-defined]
    handle = await engine.graphs.submit(g)
    worker = await _running(engine)
    try:
        for _ in range(600):
            if (await handle.status()).state is GraphState.RUNNING:
                break
            await asyncio.sleep(0.05)
        assert (await handle.status()).state is GraphState.RUNNING
        await handle.cancel()
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    assert status.state is GraphState.CANCELLED
    assert {n.job.state for n in (await handle.status(nodes=True)).nodes} == {JobState.CANCELLED}
    assert "number:1" not in ledger.calls
    with pytest.raises(IllegalState, match="already cancelled"):
        await handle.cancel()
    assert [e.type for e in await engine.events(limit=1000) if e.type.startswith("graph.")] == ["graph.cancelled"]


async def test_retry_runs_only_failed_and_cancelled_nodes_with_results_read_again(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    g = Graph("retry")
    a = g.add("a", t["number"].s(3))  # type: ignore[attr-defined]
    f = g.add("f", t["flaky"].s(4), after=[a])  # type: ignore[attr-defined]
    g.add("sum", t["add"].s(0), after=[a, f])  # type: ignore[attr-defined]
    handle = await engine.graphs.submit(g)
    worker = await _running(engine)
    try:
        assert (await handle.wait(TIMEOUT)).state is GraphState.FAILED
        with pytest.raises(NotFound):
            await engine.graphs.retry(handle.id, tenant="other")  # another tenant's graph
    except Exception:
        await _stop(engine, worker)
        raise
    try:
        ledger.fail.clear()
        await handle.retry()
        status = await handle.wait(TIMEOUT)
    finally:
        await _stop(engine, worker)
    assert status.state is GraphState.SUCCEEDED
    # a ran once: its result, stored, reached sum on the retry.
    assert ledger.calls == ["number:3", "flaky", "flaky", "add"]
    assert (await handle.results())["sum"] == 7
    types = [e.type for e in await engine.events(limit=1000) if e.type.startswith("graph.")]
    assert types == ["graph.failed", "graph.completed"]
    with pytest.raises(IllegalState, match="succeeded"):
        await handle.retry()


async def test_bad_graphs_are_refused_naming_the_field(engine: Engine) -> None:
    t = register(engine, Ledger())
    g = Graph("cycle")
    g.add("a", t["number"].s(1), after=["b"])  # type: ignore[attr-defined]
    g.add("b", t["number"].s(2), after=["a"])  # type: ignore[attr-defined]
    with pytest.raises(InvalidJob, match="edges: the graph has a cycle"):
        await engine.graphs.submit(g)
    g = Graph("unknown")
    g.add("a", t["number"].s(1), after=["nope"])  # type: ignore[attr-defined]
    with pytest.raises(InvalidJob, match="edges: node 'a' depends on unknown node 'nope'"):
        await engine.graphs.submit(g)
    with pytest.raises(InvalidJob, match="policy: must be one of"):
        Graph().add("a", t["number"].s(1), policy="sometimes")  # type: ignore[attr-defined]
    big = group([t["number"].s(i) for i in range(MAX_NODES + 1)])  # type: ignore[attr-defined]
    with pytest.raises(InvalidJob, match=f"nodes: a graph has at most {MAX_NODES} nodes"):
        await engine.graphs.submit(big)
    assert sum((await engine.count_jobs()).values()) == 0


async def test_a_node_retried_alone_reopens_its_graph(engine: Engine) -> None:
    ledger = Ledger()
    t = register(engine, ledger)
    handle = await engine.graphs.submit(group(t["flaky"].s(1), t["number"].s(2), name="alone"))  # type: ignore[attr-defined]
    worker = await _running(engine)
    try:
        assert (await handle.wait(TIMEOUT)).state is GraphState.FAILED
        ledger.fail.clear()
        dead = next(n for n in (await handle.status(nodes=True)).nodes if n.job.state is JobState.DEAD)
        await engine.retry(dead.job.id)
        assert (await handle.status()).state is not GraphState.FAILED
        assert (await handle.wait(TIMEOUT)).state is GraphState.SUCCEEDED
    finally:
        await _stop(engine, worker)
    types = [e.type for e in await engine.events(limit=1000) if e.type.startswith("graph.")]
    assert types == ["graph.failed", "graph.completed"]


async def test_a_sync_task_reads_its_parents_results(engine: Engine) -> None:
    t = register(engine, Ledger())

    @engine.task
    def double_all(ctx: SyncJobContext) -> dict[str, int]:
        return {name: 2 * int(v) for name, v in ctx.parent_results().items()}

    handle = await engine.graphs.submit(chord([t["number"].s(1), t["number"].s(2)], double_all.s()))  # type: ignore[attr-defined]
    worker = await _running(engine)
    try:
        assert (await handle.wait(TIMEOUT)).state is GraphState.SUCCEEDED
    finally:
        await _stop(engine, worker)
    assert (await handle.results())["double_all"] == {"number": 2, "number-2": 4}
