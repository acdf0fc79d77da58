"""Dynamic fan-out on SQLite and PostgreSQL: a running node adds nodes to its own graph, stored with its
completion (or not at all), and a join declared in advance waits for them and sees their results. Also the
failure policies' re-queue, made inside the store transaction that records the failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine import JobContext, NonRetryable
from jobengine.core.graphs import GraphState
from jobengine.core.ids import LeaseToken, WorkerId
from jobengine.core.models import AddedNode, AttemptError, Completion, FailOutcome, Failure
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import Graph
from jobengine.errors import InvalidJob
from jobengine.settings import Settings
from tests.support.graph_tasks import running_worker

TIMEOUT = 60.0
N = 5


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "jobs.db")
    async with Engine.from_settings(Settings(database=database, poll_interval=0.05)) as e:
        yield e


class Script:
    """What the split task does on each attempt (a test changes it), and what ran."""

    def __init__(self) -> None:
        self.fail_attempts: set[int] = set()
        self.dead = False
        self.extra: list[str] = []
        self.calls: list[str] = []


def register(engine: Engine, script: Script) -> dict[str, object]:
    @engine.task
    async def work(ctx: JobContext, n: int) -> int:
        script.calls.append(f"work:{n}")
        return n * n

    @engine.task(max_attempts=3, retry=RetryPolicy(base=0.05, jitter=False))
    async def split(ctx: JobContext, n: int) -> int:
        script.calls.append(f"split:{ctx.attempt}")
        for i in range(n):
            ctx.graph.add(work.s(i), name=f"work-{i}", before=["join"])
        for name in script.extra:
            ctx.graph.add(work.s(0), name=name)
        if script.dead:
            raise NonRetryable("split failed after adding")
        if ctx.attempt in script.fail_attempts:
            raise RuntimeError("split failed this attempt")
        return n

    @engine.task
    async def join(ctx: JobContext) -> dict[str, object]:
        parents = dict(await ctx.parent_results())
        script.calls.append("join")
        works = {k: v for k, v in parents.items() if k.startswith("work-")}
        return {"names": sorted(parents), "sum": sum(int(v) for v in works.values())}

    return {"work": work, "split": split, "join": join}


def fan(t: dict[str, object], n: int = N) -> Graph:
    g = Graph("fan")
    s = g.add("split", t["split"].s(n))  # type: ignore[attr-defined]
    g.add("join", t["join"].s(), after=[s])  # type: ignore[attr-defined]
    return g


async def run_to_end(engine: Engine, graph: Graph) -> tuple[str, GraphState]:
    handle = await engine.graphs.submit(graph)
    async with running_worker(engine):
        status = await handle.wait(TIMEOUT)
    return handle.id, status.state


async def test_split_adds_n_nodes_and_the_join_declared_in_advance_sees_all_results(engine: Engine) -> None:
    script = Script()
    graph_id, state = await run_to_end(engine, fan(register(engine, script)))
    assert state is GraphState.SUCCEEDED
    status = await engine.graphs.get(graph_id, nodes=True)
    assert (status.total, status.done, status.progress) == (N + 2, N + 2, 1.0)
    nodes = {n.name: n for n in status.nodes}
    assert sorted(nodes) == sorted(["split", "join", *(f"work-{i}" for i in range(N))])
    assert nodes["join"].parents == ("split", *(f"work-{i}" for i in range(N)))
    assert nodes["work-3"].parents == ("split",)
    assert nodes["join"].job.result == {
        "names": sorted(["split", *(f"work-{i}" for i in range(N))]),
        "sum": sum(i * i for i in range(N)),
    }
    # The join ran once, after every work node.
    assert script.calls.index("join") == len(script.calls) - 1 and script.calls.count("join") == 1


async def test_a_node_that_adds_nodes_and_then_fails_adds_nothing(engine: Engine) -> None:
    script = Script()
    script.dead = True
    graph_id, state = await run_to_end(engine, fan(register(engine, script)))
    assert state is GraphState.FAILED
    status = await engine.graphs.get(graph_id, nodes=True)
    assert status.total == 2
    assert {n.name: n.job.state for n in status.nodes} == {"split": JobState.DEAD, "join": JobState.CANCELLED}
    assert not [c for c in script.calls if c.startswith("work")]


async def test_a_retried_node_adds_its_nodes_once_when_it_succeeds(engine: Engine) -> None:
    script = Script()
    script.fail_attempts = {1, 2}
    graph_id, state = await run_to_end(engine, fan(register(engine, script)))
    assert state is GraphState.SUCCEEDED
    assert [c for c in script.calls if c.startswith("split")] == ["split:1", "split:2", "split:3"]
    status = await engine.graphs.get(graph_id, nodes=True)
    assert status.total == N + 2 and len(status.nodes) == N + 2
    assert sorted(c for c in script.calls if c.startswith("work")) == sorted(f"work:{i}" for i in range(N))


async def test_a_name_the_graph_has_fails_the_adding_node(engine: Engine) -> None:
    script = Script()
    script.extra = ["join"]  # already in the graph
    graph_id, state = await run_to_end(engine, fan(register(engine, script), n=0))
    assert state is GraphState.FAILED
    status = await engine.graphs.get(graph_id, nodes=True)
    nodes = {n.name: n.job for n in status.nodes}
    assert set(nodes) == {"split", "join"} and status.total == 2
    assert nodes["split"].state is JobState.DEAD
    assert nodes["split"].errors[-1].type == "InvalidJob"
    assert "'join' is already in the graph" in nodes["split"].errors[-1].message
    # The refusal is the error of the attempt that added the nodes, on the worker that ran it.
    assert nodes["split"].attempt == 1 and [e.attempt for e in nodes["split"].errors] == [1]
    assert nodes["split"].errors[-1].worker is not None


async def test_added_nodes_run_after_each_other(engine: Engine) -> None:
    calls: list[str] = []

    @engine.task
    async def step(ctx: JobContext, name: str) -> str:
        calls.append(name)
        return name

    @engine.task
    async def seed(ctx: JobContext) -> None:
        ctx.graph.add(step.s("a"), name="a")
        ctx.graph.add(step.s("b"), name="b", after=["a"])
        ctx.graph.add(step.s("c"), name="c", after=["b"])

    g = Graph("chained")
    g.add("seed", seed.s())
    graph_id, state = await run_to_end(engine, g)
    assert state is GraphState.SUCCEEDED
    assert calls == ["a", "b", "c"]
    assert (await engine.graphs.get(graph_id)).total == 4


async def test_only_a_graph_node_can_add_nodes(engine: Engine) -> None:
    errors: list[BaseException] = []

    @engine.task
    async def plain(ctx: JobContext) -> None:
        try:
            ctx.graph.add(plain.s(), name="x")
        except InvalidJob as exc:
            errors.append(exc)

    job = await engine.enqueue("plain")
    worker = engine.worker(concurrency=1, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(1200):
            if (await engine.get_job(job.id)).terminal:
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, TIMEOUT)
    assert len(errors) == 1 and "only a node of a graph" in str(errors[0])


async def test_added_nodes_count_in_the_graph_from_the_completion_and_a_lost_lease_adds_none(engine: Engine) -> None:
    @engine.task
    async def noop(ctx: JobContext) -> None:
        return None

    g = Graph("counted")
    g.add("split", noop.s())
    g.add("join", noop.s(), after=["split"])
    handle = await engine.graphs.submit(g)
    [split] = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w1"), 30.0)
    assert split.lease_token is not None
    nodes = tuple(AddedNode(f"work-{i}", "noop", {}, before=("join",)) for i in range(N))
    stale = await engine.transitions.complete_jobs([Completion(split.id, LeaseToken("stale"), 1, nodes)])
    assert stale.jobs == [] and (await handle.status()).total == 2
    changed = await engine.transitions.complete_jobs([Completion(split.id, split.lease_token, 1, nodes)])
    assert {j.state for j in changed.jobs if j.id != split.id} == {JobState.QUEUED}
    assert len(changed.jobs) == N + 1
    status = await handle.status(nodes=True)
    assert (status.state, status.total, status.done) == (GraphState.RUNNING, N + 2, 1)
    assert status.progress == pytest.approx(1 / (N + 2))
    states = {n.name: n.job.state for n in status.nodes}
    assert states["join"] is JobState.BLOCKED and states["split"] is JobState.SUCCEEDED
    assert [states[f"work-{i}"] for i in range(N)] == [JobState.QUEUED] * N
    assert {e.type for e in changed.events} >= {"job.enqueued", "job.succeeded", "job.unblocked"}


# -- tolerated nodes are queued in the failure's own transaction ----------------------------------------


@pytest.mark.parametrize("policy", ["continue", "always"])
async def test_a_tolerated_failure_queues_the_dependent_in_the_same_store_transition(
    engine: Engine, policy: str
) -> None:
    @engine.task
    async def noop(ctx: JobContext) -> None:
        return None

    g = Graph("tolerated")
    g.add("a", noop.s(), policy="continue" if policy == "continue" else "cancel")
    g.add("b", noop.s(), after=["a"], policy="always" if policy == "always" else "cancel")
    handle = await engine.graphs.submit(g)
    claimed = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w1"), 30.0)
    assert len(claimed) == 1
    a = claimed[0]
    assert a.lease_token is not None
    error = AttemptError(a.attempt, engine.clock.now(), "RuntimeError", "boom")
    # The store's transition alone, as if the process died right after it: the engine's bookkeeping that
    # follows a transition never runs.
    changed = await engine.store.fail_jobs([Failure(a.id, a.lease_token, error, FailOutcome.DEAD)], engine.clock.now())
    states = {j.id: j.state for j in changed.jobs}
    nodes = {n.name: n.job for n in (await handle.status(nodes=True)).nodes}
    assert states[a.id] is JobState.DEAD
    assert states[nodes["b"].id] is JobState.QUEUED
    assert nodes["b"].state is JobState.QUEUED
    assert "job.retried" in [e.type for e in changed.events if e.job_id == nodes["b"].id]


async def test_a_tolerated_parent_waits_for_the_other_parent_to_succeed_in_its_transition(engine: Engine) -> None:
    @engine.task
    async def noop(ctx: JobContext) -> None:
        return None

    g = Graph("two-parents")
    g.add("a", noop.s(), policy="continue")
    g.add("q", noop.s())
    g.add("c", noop.s(), after=["a", "q"])
    handle = await engine.graphs.submit(g)
    claimed = {j.id: j for j in await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w1"), 30.0)}
    nodes = {n.name: n.job for n in (await handle.status(nodes=True)).nodes}
    a, q = claimed[nodes["a"].id], claimed[nodes["q"].id]
    assert a.lease_token is not None and q.lease_token is not None
    now = engine.clock.now()
    error = AttemptError(a.attempt, now, "RuntimeError", "boom")
    failed = await engine.store.fail_jobs([Failure(a.id, a.lease_token, error, FailOutcome.DEAD)], now)
    assert nodes["c"].id not in {j.id for j in failed.jobs if j.state is JobState.QUEUED}
    done = await engine.store.complete_jobs([Completion(q.id, q.lease_token, None)], engine.clock.now())
    assert {j.id: j.state for j in done.jobs}[nodes["c"].id] is JobState.QUEUED
    nodes = {n.name: n.job for n in (await handle.status(nodes=True)).nodes}
    assert nodes["c"].state is JobState.QUEUED
