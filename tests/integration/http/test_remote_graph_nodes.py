"""Graph nodes run by remote workers: a claimed node carries its graph's id and its node name, and reads
its parents' results from ``GET /api/v1/worker/jobs/{id}/parent-results``; the Python SDK worker's context
answers ``parent_results()`` from it, against the real HTTP app served on a port, on SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from jobengine.core.graphs import MAX_PARENT_RESULTS
from jobengine.http.server import ApiService
from jobengine.sdk import ApiClient, GraphNode, RemoteWorker, TaskApp
from jobengine.worker import JobContext, SyncJobContext

from .conftest import Api, MakeApi

TIMEOUT = 60.0
PARENT_RESULTS = "/api/v1/worker/jobs/{}/parent-results"


@asynccontextmanager
async def served(api: Api) -> AsyncIterator[str]:
    service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
    await service.start()
    try:
        yield service.url
    finally:
        await service.stop()


def fan_in_app() -> TaskApp:
    app = TaskApp()

    @app.task()
    async def number(n: int) -> int:
        return n

    @app.task()
    async def total(ctx: JobContext) -> int:
        return sum((await ctx.parent_results()).values())

    @app.task()
    def report(ctx: SyncJobContext) -> dict[str, Any]:  # a sync task: its context blocks while reading
        return dict(ctx.parent_results())

    @app.task()
    async def plain(ctx: JobContext) -> dict[str, Any]:
        return dict(await ctx.parent_results())

    @app.task(max_attempts=3)
    async def big(size: int) -> str:
        return "x" * size

    return app


async def test_a_remote_python_fan_in_node_sums_its_parents_results(make_api: MakeApi) -> None:
    async with make_api() as api, served(api) as url:
        worker = RemoteWorker(url, key=await api.key("acme", "worker"), tasks=fan_in_app(), long_poll=1.0)
        run = asyncio.create_task(worker.run())
        async with ApiClient(url, api.keys["acme"]) as sdk:
            numbers = [GraphNode(f"n{i}", "number", {"n": i}) for i in (1, 2, 3, 4)]
            submitted = await sdk.graphs.submit(
                [*numbers, GraphNode("total", "total", after=[n.name for n in numbers]),
                 GraphNode("report", "report", after=["total"])],
                name="fan-in",
            )  # fmt: skip
            plain = await sdk.enqueue("plain")
            done = await sdk.graphs.wait(submitted.id, timeout=TIMEOUT)
            plain_done = await sdk.wait(plain["id"], timeout=TIMEOUT)
        worker.stop()
        await asyncio.wait_for(run, TIMEOUT)
    assert done.state == "succeeded", [(n.name, n.state, n.job["errors"]) for n in done.nodes]
    assert done.results["total"] == 10
    assert done.results["report"] == {"total": 10}
    assert (plain_done["state"], plain_done["result"]) == ("succeeded", {})


async def test_a_claimed_node_carries_its_graph_and_reads_its_parents_results(api: Api) -> None:
    async with (
        api.client(await api.key("acme", "worker", "graph:write", "jobs:write")) as acme,
        api.client(tenant="globex") as other,
    ):
        graph = {"name": "pair", "nodes": [{"name": "a", "task": "t"}, {"name": "b", "task": "t"}],
                 "edges": [["a", "b"]]}  # fmt: skip
        submitted = await acme.post("/api/v1/graphs", json=graph)
        assert submitted.status_code == 201, submitted.text
        graph_id = submitted.json()["id"]
        plain = (await acme.post("/api/v1/jobs", json={"task": "t"})).json()

        claim = {"worker_id": "w1", "limit": 10}
        first = {c["job"]["id"]: c for c in (await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"]}
        assert set(first) == {plain["id"], *(j for j, c in first.items() if c["graph"])} and len(first) == 2
        assert first[plain["id"]]["graph"] is None
        [a] = [c for c in first.values() if c["graph"]]
        assert a["graph"] == {"id": graph_id, "node": "a"} and a["job"]["graph_id"] == graph_id

        own = (await acme.get(PARENT_RESULTS.format(plain["id"]))).json()
        assert own == {"graph_id": None, "node": None, "results": {}}
        assert (await acme.get(PARENT_RESULTS.format(a["job"]["id"]))).json()["results"] == {}
        report = {"token": a["lease"]["token"], "result": {"rows": 41}}
        completed = await acme.post(f"/api/v1/worker/jobs/{a['job']['id']}/complete", json=report)
        assert completed.status_code == 200, completed.text

        [b] = (await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"]
        assert b["graph"] == {"id": graph_id, "node": "b"}
        read = await acme.get(PARENT_RESULTS.format(b["job"]["id"]))
        assert read.status_code == 200, read.text
        assert read.json() == {"graph_id": graph_id, "node": "b", "results": {"a": {"rows": 41}}}

        hidden = await other.get(PARENT_RESULTS.format(b["job"]["id"]))
        assert hidden.status_code == 404 and hidden.headers["content-type"] == "application/problem+json"
        reader = await api.key("acme", "jobs:read")
        async with api.client(reader) as unscoped:
            assert (await unscoped.get(PARENT_RESULTS.format(b["job"]["id"]))).status_code == 403


async def test_parents_results_past_the_limit_send_a_remote_node_to_dead(make_api: MakeApi) -> None:
    half = MAX_PARENT_RESULTS // 2 + 1000  # two parents' results together pass the limit
    async with make_api(api_max_body_bytes=4 * half) as api, served(api) as url:
        worker = RemoteWorker(url, key=await api.key("acme", "worker"), tasks=fan_in_app(), long_poll=1.0)
        run = asyncio.create_task(worker.run())
        async with ApiClient(url, api.keys["acme"]) as sdk:
            submitted = await sdk.graphs.submit([
                GraphNode("left", "big", {"size": half}), GraphNode("right", "big", {"size": half}),
                GraphNode("total", "plain", after=["left", "right"], max_attempts=3),
            ])  # fmt: skip
            done = await sdk.graphs.wait(submitted.id, timeout=TIMEOUT)
            total = next(n for n in done.nodes if n.name == "total")
        worker.stop()
        await asyncio.wait_for(run, TIMEOUT)
        async with api.client() as acme:
            answer = await acme.get(PARENT_RESULTS.format(total.job["id"]))
    assert done.state == "failed" and total.state == "dead"
    [error] = total.job["errors"]  # no second attempt: it would read the same results
    assert error["type"] == "ResultsTooLarge" and "pass a reference" in error["message"]
    assert total.job["attempt"] == 1
    problem = answer.json()
    assert answer.status_code == 409 and problem["type"] == "urn:jobengine:problem:results-too-large"
    assert problem["field"] == "results" and problem["limit"] == MAX_PARENT_RESULTS
    assert problem["size"] > MAX_PARENT_RESULTS
