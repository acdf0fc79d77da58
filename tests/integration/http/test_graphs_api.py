"""``/api/v1/graphs``: submit, read, cancel and retry graphs over HTTP, under the ``graph:*`` scopes and the
key's tenant; bad graphs are 422 problems naming the field. On SQLite (the fixtures) and PostgreSQL."""

from __future__ import annotations

import asyncio

import httpx

from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from tests.support.graph_tasks import TIMEOUT, register, running_worker

from .conftest import Api, MakeApi

FAN = {
    "name": "fan",
    "nodes": [
        {"name": "start", "task": "number", "payload": {"n": 1}},
        *({"name": f"n{i}", "task": "number", "payload": {"n": i}} for i in range(5)),
        {"name": "sum", "task": "total", "policy": "cancel"},
    ],
    "edges": [
        *(["start", f"n{i}"] for i in range(5)),
        *([f"n{i}", "sum"] for i in range(5)),
    ],
}


async def _until_ended(client: httpx.AsyncClient, graph_id: str) -> dict[str, object]:
    for _ in range(int(TIMEOUT / 0.05)):
        body = (await client.get(f"/api/v1/graphs/{graph_id}")).json()
        if body["state"] in ("succeeded", "failed", "cancelled"):
            return body  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"graph {graph_id} did not end within {TIMEOUT}s")


async def _lifecycle(engine: Engine, acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    calls = register(engine)
    created = await acme.post("/api/v1/graphs", json=FAN)
    assert created.status_code == 201, created.text
    graph = created.json()
    assert created.headers["Location"] == f"/api/v1/graphs/{graph['id']}"
    assert (graph["state"], graph["total"], graph["done"], graph["name"]) == ("pending", 7, 0, "fan")
    assert (await globex.get(f"/api/v1/graphs/{graph['id']}")).status_code == 404
    by_prefix = await acme.get(f"/api/v1/graphs/{graph['id'][:13]}")  # a short id names the graph
    assert by_prefix.status_code == 200 and by_prefix.json()["id"] == graph["id"], by_prefix.text
    assert (await globex.get(f"/api/v1/graphs/{graph['id'][:13]}")).status_code == 404
    assert (await globex.post(f"/api/v1/graphs/{graph['id']}/cancel")).status_code == 404
    assert (await globex.get("/api/v1/graphs")).json()["items"] == []

    async with running_worker(engine):
        ended = await _until_ended(acme, graph["id"])
        assert ended["state"] == "succeeded" and ended["done"] == 7 and ended["completed_at"] is not None
        nodes = {n["name"]: n for n in ended["nodes"]}  # type: ignore[attr-defined]
        assert nodes["sum"]["job"]["result"] == 1 + 2 + 3 + 4 and nodes["sum"]["job"]["graph_id"] == graph["id"]
        assert sorted(nodes["sum"]["parents"]) == [f"n{i}" for i in range(5)]
        assert calls.count("total") == 1
        listed = (await acme.get("/api/v1/graphs")).json()
        assert [g["id"] for g in listed["items"]] == [graph["id"]] and listed["items"][0]["nodes"] is None

        again = await acme.post("/api/v1/graphs/" + graph["id"] + "/retry")
        assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"

        failing = {
            "name": "failing",
            "nodes": [{"name": "a", "task": "boom"}, {"name": "b", "task": "number", "payload": {"n": 9}}],
            "edges": [["a", "b"]],
        }
        second = (await acme.post("/api/v1/graphs", json=failing)).json()
        assert (await _until_ended(acme, second["id"]))["state"] == "failed"
        calls.append("fixed")
        retried = await acme.post(f"/api/v1/graphs/{second['id']}/retry")
        assert retried.status_code == 200, retried.text
        assert (await _until_ended(acme, second["id"]))["state"] == "succeeded"
        assert calls.count("number:9") == 1
    types = [e.type for e in await engine.events(limit=1000, tenant="acme") if e.type.startswith("graph.")]
    assert types == ["graph.completed", "graph.failed", "graph.completed"]


async def test_a_graph_over_http(api: Api, acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    await _lifecycle(api.engine, acme, globex)


async def test_a_graph_over_http_on_postgres(postgres_dsn: str) -> None:
    settings = Settings(database=postgres_dsn, claim_max_wait=0.5)
    async with Engine.from_settings(settings) as engine:
        keys = {t: (await engine.keys.create(t, ["graph:read", "graph:write"]))[1] for t in ("acme", "globex")}
        app = create_app(engine, settings)

        def client(tenant: str) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {keys[tenant]}"}
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pg", headers=headers)

        async with client("acme") as acme, client("globex") as globex:
            await _lifecycle(engine, acme, globex)


async def test_cancel_over_http(api: Api, acme: httpx.AsyncClient) -> None:
    body = {"nodes": [{"name": "a", "task": "later"}, {"name": "b", "task": "later"}], "edges": [["a", "b"]]}
    graph = (await acme.post("/api/v1/graphs", json=body)).json()
    cancelled = await acme.post(f"/api/v1/graphs/{graph['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled" and cancelled.json()["counts"] == {"cancelled": 2}
    assert (await acme.post(f"/api/v1/graphs/{graph['id']}/cancel")).status_code == 409


async def test_scopes(api: Api) -> None:
    reader = await api.key("acme", "graph:read")
    jobs_only = await api.key("acme", "jobs:read", "jobs:write")
    async with api.client(reader) as c:
        assert (await c.get("/api/v1/graphs")).status_code == 200
        r = await c.post("/api/v1/graphs", json=FAN)
        assert r.status_code == 403 and r.json()["required_scope"] == "graph:write"
    async with api.client(jobs_only) as c:
        assert (await c.get("/api/v1/graphs")).status_code == 403


async def test_bad_graphs_are_problems_naming_the_field(make_api: MakeApi) -> None:
    async with make_api(refuse_unknown_tasks=True) as api, api.client() as acme:
        register(api.engine)
        cases = {
            "edges": {"nodes": [{"name": "a", "task": "number"}], "edges": [["a", "a"]]},
            "nodes": {"nodes": [{"name": "a", "task": "number"}, {"name": "a", "task": "number"}]},
            "task": {"nodes": [{"name": "a", "task": "nobody_runs_this"}]},
        }
        for field, body in cases.items():
            r = await acme.post("/api/v1/graphs", json=body)
            assert r.status_code == 422, (field, r.text)
            assert r.headers["content-type"] == "application/problem+json" and r.json()["field"] == field, r.text
        cycle = {
            "nodes": [{"name": "a", "task": "number"}, {"name": "b", "task": "number"}],
            "edges": [["a", "b"], ["b", "a"]],
        }
        r = await acme.post("/api/v1/graphs", json=cycle)
        assert r.status_code == 422 and "cycle" in r.json()["detail"]
        r = await acme.post("/api/v1/graphs", json={"nodes": [{"name": "a", "task": "number"}], "edges": [["x", "a"]]})
        assert r.status_code == 422 and "unknown node 'x'" in r.json()["detail"]
        too_many = {"nodes": [{"name": f"n{i}", "task": "number"} for i in range(10_001)]}
        r = await acme.post("/api/v1/graphs", json=too_many)
        assert r.status_code in (413, 422), r.text
        r = await acme.post("/api/v1/graphs", json={"nodes": [{"name": "a", "task": "number", "policy": "maybe"}]})
        assert r.status_code == 422 and r.json()["field"] == "nodes.0.policy"
        assert (await acme.get("/api/v1/graphs")).json()["items"] == []
        assert (await acme.get("/api/v1/graphs/nope")).status_code == 404


# -- dynamic fan-out through the worker protocol ---------------------------------------------------------


async def test_a_remote_worker_completes_a_node_with_the_nodes_it_adds(api: Api, acme: httpx.AsyncClient) -> None:
    w = "/api/v1/worker"
    graph = {
        "name": "remote-fan",
        "nodes": [{"name": "split", "task": "split"}, {"name": "join", "task": "join"}, {"name": "x", "task": "x"}],
        "edges": [["split", "join"]],
    }
    created = (await acme.post("/api/v1/graphs", json=graph)).json()
    claimed = (await acme.post(f"{w}/claim", json={"worker_id": "r1", "tasks": ["split"]})).json()["jobs"]
    [entry] = claimed
    jid, token = entry["job"]["id"], entry["lease"]["token"]

    # A name the graph has, and a before node that does not wait on split: 422 naming the field; still running.
    for nodes, field in [
        ([{"name": "x", "task": "work"}], "nodes"),
        ([{"name": "w", "task": "work", "before": ["x"]}], "nodes.before"),
    ]:
        refused = await acme.post(f"{w}/jobs/{jid}/complete", json={"token": token, "nodes": nodes})
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"] == "application/problem+json" and field in refused.text
        assert (await acme.get(f"/api/v1/jobs/{jid}")).json()["state"] == "running"
    bad = await acme.post(f"{w}/jobs/{jid}/complete", json={"token": token, "nodes": [{"name": "w"}]})
    assert bad.status_code == 422  # the schema: a node needs its task

    nodes = [
        {"name": "work-0", "task": "work", "payload": {"n": 0}, "before": ["join"]},
        {"name": "work-1", "task": "work", "payload": {"n": 1}, "before": ["join"]},
        {"name": "after-1", "task": "work", "payload": {"n": 2}, "after": ["work-1"], "before": ["join"]},
    ]
    done = await acme.post(f"{w}/jobs/{jid}/complete", json={"token": token, "result": 3, "nodes": nodes})
    assert done.status_code == 200 and done.json()["completed"] == [jid], done.text
    body = (await acme.get(f"/api/v1/graphs/{created['id']}")).json()
    assert body["total"] == 6
    by_name = {n["name"]: n for n in body["nodes"]}
    assert by_name["join"]["parents"] == ["split", "work-0", "work-1", "after-1"]
    assert by_name["after-1"]["parents"] == ["work-1"] and by_name["after-1"]["job"]["state"] == "blocked"
    assert by_name["work-0"]["job"]["state"] == "queued" and by_name["join"]["job"]["state"] == "blocked"

    # A report whose completion adds a node the graph refuses: that node ends dead, listed as failed.
    [work] = (await acme.post(f"{w}/claim", json={"worker_id": "r1", "tasks": ["work"]})).json()["jobs"]
    report = {"completions": [{"job_id": work["job"]["id"], "token": work["lease"]["token"],
                               "nodes": [{"name": "join", "task": "work"}]}]}  # fmt: skip
    out = (await acme.post(f"{w}/report", json=report)).json()
    assert out["failed"] == [work["job"]["id"]] and out["completed"] == []
    dead = (await acme.get(f"/api/v1/jobs/{work['job']['id']}")).json()
    assert dead["state"] == "dead" and "already in the graph" in dead["errors"][-1]["message"]
