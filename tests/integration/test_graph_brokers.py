"""Graphs over the brokers: a graph whose nodes travel through Redis Streams or NATS JetStream (a SQLite
store) runs every node once, including the nodes a running node adds and a cleanup node the failure
policy queues again inside the store's transaction, which the broker learns of from the relay."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine import JobContext, NonRetryable
from jobengine.core.graphs import GraphState
from jobengine.core.queue_config import NatsConfig, NatsQueue, QueueConfig, RedisConfig, RedisQueue
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import Graph
from jobengine.settings import Settings
from support.services import drop_nats_streams, unique_name
from tests.support.graph_tasks import running_worker

TIMEOUT = 120.0
N = 8


@pytest.fixture(params=["redis", "nats"])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Settings]:
    """The queues of one test, named for it. Its NATS streams are dropped after it: the server outlives the
    test run. (Its Redis db is its own, flushed after it.)"""
    name = unique_name("graphs")
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        queues = {
            q: RedisQueue(f"{name}:{q}", f"{name}-{q}", f"{name}:{q}:dead", f"{name}:{q}:idem:")
            for q in ("planner", "runner")
        }
        queue = QueueConfig(kind="redis", redis=RedisConfig(url, **queues))
    else:
        url = request.getfixturevalue("nats_url")
        streams = {
            q: NatsQueue(f"{name}_{q}", f"{name}.{q}", f"{name}-{q}", f"{name}_{q}_D", f"{name}.{q}.d")
            for q in ("planner", "runner")
        }
        queue = QueueConfig(kind="nats", nats=NatsConfig(url, **streams))
    # A long poll: the runner hears of its jobs from the broker, not by reading the store.
    yield Settings(database=str(tmp_path / "graphs.db"), queue=queue, poll_interval=60.0)
    if queue.kind == "nats":
        await drop_nats_streams(url, [n for q in streams.values() for n in (q.stream, q.dead_letter_stream)])


@pytest.fixture
async def engines(settings: Settings) -> AsyncIterator[tuple[Engine, Engine]]:
    async with Engine.from_settings(settings) as producer, Engine.from_settings(settings) as runner:
        yield producer, runner


async def test_every_node_runs_once_through_the_broker(engines: tuple[Engine, Engine]) -> None:
    producer, runner = engines
    calls: Counter[str] = Counter()

    @runner.task
    async def work(ctx: JobContext, n: int) -> int:
        calls[f"work-{n}"] += 1
        return n

    @runner.task
    async def split(ctx: JobContext, n: int) -> int:
        calls["split"] += 1
        for i in range(n):
            ctx.graph.add(work.s(i), name=f"work-{i}", before=["join"])
        return n

    @runner.task
    async def join(ctx: JobContext) -> int:
        calls["join"] += 1
        results = await ctx.parent_results()
        return sum(int(v) for k, v in results.items() if k.startswith("work-"))

    @runner.task(max_attempts=1)
    async def boom(ctx: JobContext) -> None:
        calls["boom"] += 1
        raise NonRetryable("boom")

    @runner.task
    async def cleanup(ctx: JobContext) -> str:
        calls["cleanup"] += 1
        return "clean"

    graph = Graph("brokered")
    graph.add("split", split.s(N))
    graph.add("join", join.s(), after=["split"])
    graph.add("boom", boom.s(), after=["join"])
    graph.add("cleanup", cleanup.s(), after=["boom"], policy="always")
    handle = await producer.graphs.submit(graph)
    async with running_worker(runner):
        status = await handle.wait(TIMEOUT)
    assert status.state is GraphState.FAILED  # boom ended dead; cleanup ran anyway
    nodes = {n.name: n.job for n in (await producer.graphs.get(handle.id, nodes=True)).nodes}
    assert nodes["join"].result == sum(range(N)) and nodes["cleanup"].state is JobState.SUCCEEDED
    assert calls == Counter({"split": 1, "join": 1, "boom": 1, "cleanup": 1, **{f"work-{i}": 1 for i in range(N)}})


async def test_a_cleanup_node_a_cancel_lets_run_reaches_a_worker(engines: tuple[Engine, Engine]) -> None:
    producer, runner = engines
    calls: Counter[str] = Counter()

    @runner.task
    async def hold(ctx: JobContext) -> None:
        calls["hold"] += 1

    @runner.task
    async def cleanup(ctx: JobContext) -> str:
        calls["cleanup"] += 1
        return "clean"

    graph = Graph("cancelled")
    graph.add("hold", hold.s())
    graph.add("cleanup", cleanup.s(), after=["hold"], policy="always")
    handle = await producer.graphs.submit(graph)
    nodes = {n.name: n.job for n in (await producer.graphs.get(handle.id, nodes=True)).nodes}
    await producer.cancel(nodes["hold"].id)  # queued: cancelled at once, before any worker runs
    async with running_worker(runner):
        status = await handle.wait(TIMEOUT)
    assert status.state is GraphState.CANCELLED or status.state is GraphState.FAILED
    assert calls == Counter({"cleanup": 1})
