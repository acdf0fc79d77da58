"""Graphs through the Python SDK (``ApiClient.graphs``) against the real HTTP app and an engine on SQLite
with a worker running the nodes: submit, get, list, wait, the failure policies, retry and cancel; bad graphs
are ApiErrors naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from jobengine.core.graphs import GraphState, Policy
from jobengine.sdk import ApiClient, ApiError, GraphNode
from tests.support.graph_tasks import TIMEOUT, register, running_worker

from .conftest import Api


@pytest.fixture
async def sdk(api: Api) -> AsyncIterator[ApiClient]:
    async with ApiClient("http://api", api.keys["acme"], transport=httpx.ASGITransport(app=api.app)) as client:
        yield client


@pytest.fixture
def calls(api: Api) -> list[str]:
    return register(api.engine)


@pytest.fixture
async def worker(api: Api, calls: list[str]) -> AsyncIterator[None]:
    """A worker running the nodes (it runs the tasks registered before it starts)."""
    async with running_worker(api.engine):
        yield


async def test_submit_wait_get_and_list_a_fan_out_fan_in(api: Api, sdk: ApiClient) -> None:
    calls = register(api.engine)
    nodes = [
        GraphNode("start", "number", {"n": 1}),
        *(GraphNode(f"n{i}", "number", {"n": i}, after=["start"], priority=i) for i in range(5)),
    ]
    raw_sum = {"name": "sum", "task": "total", "policy": "cancel"}  # the API's JSON works as well
    submitted = await sdk.graphs.submit([*nodes, raw_sum], [[f"n{i}", "sum"] for i in range(5)], name="fan")
    assert (submitted.state, submitted.total, submitted.done, submitted.name) == (GraphState.PENDING, 7, 0, "fan")
    assert not submitted.ended and submitted.nodes == ()

    with pytest.raises(TimeoutError, match="still pending"):
        await sdk.graphs.wait(submitted.id, timeout=0.2)  # no worker yet

    async with running_worker(api.engine):
        done = await sdk.graphs.wait(submitted.id[:13], timeout=TIMEOUT)  # a unique prefix names it
    assert (done.id, done.state, done.done, done.progress) == (submitted.id, GraphState.SUCCEEDED, 7, 1.0)
    assert done.completed_at is not None and done.started_at is not None and done.counts == {"succeeded": 7}
    assert done.results["sum"] == 0 + 1 + 2 + 3 + 4 and calls.count("total") == 1
    by_name = {n.name: n for n in done.nodes}
    assert sorted(by_name["sum"].parents) == [f"n{i}" for i in range(5)] and by_name["sum"].policy is Policy.CANCEL
    assert by_name["n3"].job["priority"] == 3 and by_name["n3"].state == "succeeded"

    again = await sdk.graphs.get(submitted.id)
    assert again.state is GraphState.SUCCEEDED and len(again.nodes) == 7
    second = await sdk.graphs.submit([GraphNode("only", "number", {"n": 7})], name="second")
    first_page = await sdk.graphs.list(limit=1)
    assert [g.id for g in first_page.items] == [second.id] and first_page.next_cursor == second.id
    rest = await sdk.graphs.list(limit=1, cursor=first_page.next_cursor)
    assert [g.id for g in rest.items] == [submitted.id] and rest.items[0].nodes == ()


async def test_continue_and_always_policies_then_retry(
    api: Api, sdk: ApiClient, worker: None, calls: list[str]
) -> None:
    nodes = [
        GraphNode("a", "boom", policy=Policy.CONTINUE),
        GraphNode("b", "number", {"n": 2}, after=["a"]),
        GraphNode("c", "cleanup", after=["a", "b"], policy="always"),
    ]
    failed = await sdk.graphs.wait((await sdk.graphs.submit(nodes)).id, timeout=TIMEOUT)
    # a failed, b ran anyway (continue), c ran as a cleanup: the graph failed because a did.
    assert failed.state is GraphState.FAILED and failed.counts == {"dead": 1, "succeeded": 2}
    assert failed.results == {"b": 2, "c": ["b"]}

    with pytest.raises(ApiError) as refused:
        await sdk.graphs.cancel(failed.id)
    assert refused.value.status == 409

    calls.append("fixed")
    retried = await sdk.graphs.retry(failed.id)
    assert retried.state in (GraphState.PENDING, GraphState.RUNNING, GraphState.SUCCEEDED)
    done = await sdk.graphs.wait(failed.id, timeout=TIMEOUT)
    assert done.state is GraphState.SUCCEEDED and done.counts == {"succeeded": 3}
    assert calls.count("number:2") == 1 and calls.count("boom") == 2  # what succeeded did not run again


async def test_a_failure_cancels_the_nodes_after_it_by_default(
    api: Api, sdk: ApiClient, worker: None, calls: list[str]
) -> None:
    nodes = [GraphNode("a", "boom"), GraphNode("b", "number", {"n": 5}, after=["a"])]
    failed = await sdk.graphs.wait((await sdk.graphs.submit(nodes)).id, timeout=TIMEOUT)
    states = {n.name: n.state for n in failed.nodes}
    assert failed.state is GraphState.FAILED and states == {"a": "dead", "b": "cancelled"}
    assert "number:5" not in calls


async def test_cancel_stops_a_running_graph(api: Api, sdk: ApiClient, worker: None, calls: list[str]) -> None:
    graph = await sdk.graphs.submit([GraphNode("s", "slow"), GraphNode("after", "number", {"n": 1}, after=["s"])])
    for _ in range(int(TIMEOUT / 0.05)):
        if "slow" in calls:
            break
        await asyncio.sleep(0.05)
    assert (await sdk.graphs.get(graph.id)).state is GraphState.RUNNING
    await sdk.graphs.cancel(graph.id)
    done = await sdk.graphs.wait(graph.id, timeout=TIMEOUT)
    assert done.state is GraphState.CANCELLED and done.counts == {"cancelled": 2}
    assert "number:1" not in calls


async def test_bad_graphs_and_unknown_ones_are_api_errors(api: Api, sdk: ApiClient) -> None:
    register(api.engine)
    with pytest.raises(ApiError) as cycle:
        await sdk.graphs.submit([GraphNode("a", "number", after=["b"]), GraphNode("b", "number", after=["a"])])
    assert cycle.value.status == 422 and cycle.value.problem["field"] == "edges"
    # The message names the field once: the engine's detail does not name it, the schema's does.
    assert str(cycle.value).startswith("HTTP 422: edges: ") and str(cycle.value).count("edges") == 1
    with pytest.raises(ApiError) as policy:
        await sdk.graphs.submit([GraphNode("a", "number", policy="maybe")])
    assert policy.value.status == 422 and policy.value.problem["field"] == "nodes.0.policy"
    assert str(policy.value).startswith("HTTP 422: nodes.0.policy: ") and str(policy.value).count("policy:") == 1
    with pytest.raises(ApiError) as missing:
        await sdk.graphs.get("no-such-graph")
    assert missing.value.status == 404
    with pytest.raises(ValueError, match="timeout"):
        await sdk.graphs.wait("no-such-graph", timeout=-1)
    assert (await sdk.graphs.list()).items == []


async def test_a_submit_retried_after_a_lost_answer_stores_one_graph(api: Api) -> None:
    inner = httpx.ASGITransport(app=api.app)
    keys: list[str] = []

    class LosesFirstAnswer(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST":
                keys.append(request.headers["idempotency-key"])
            response = await inner.handle_async_request(request)
            if len(keys) == 1 and request.method == "POST":
                await response.aread()
                return httpx.Response(503, json={"status": 503, "detail": "lost"})
            return response

    register(api.engine)
    async with ApiClient("http://api", api.keys["acme"], transport=LosesFirstAnswer(), backoff_base=0.01) as c:
        graph = await c.graphs.submit([GraphNode("a", "number", {"n": 1})])
        assert len(keys) == 2 and keys[0] == keys[1]
        assert [g.id for g in (await c.graphs.list()).items] == [graph.id]
