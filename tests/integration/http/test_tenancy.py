"""The cross-tenant matrix: tenant A's key against everything of tenant B answers 404 (exactly like an id
that does not exist), changes none of B's rows, and A's lists never contain B's items."""

from __future__ import annotations

from typing import Any

import httpx

from jobengine.core.models import JobFilter
from jobengine.serialize import job_to_json

from .conftest import Api
from .test_api_jobs import dead_job

MISSING = "01900000-0000-7000-8000-00000000dead"


async def b_world(api: Api, globex: httpx.AsyncClient) -> dict[str, Any]:
    """Tenant B (globex): a queued job, a scheduled one, a running one (with its lease), a dead one."""
    queued = (await globex.post("/api/v1/jobs", json={"task": "b.task", "payload": {"secret": 1}})).json()
    scheduled = (await globex.post("/api/v1/jobs", json={"task": "b.task", "delay": 3600.0})).json()
    dead = await dead_job(globex, "b.dead")
    running_job = (await globex.post("/api/v1/jobs", json={"task": "b.run"})).json()
    claim = (await globex.post("/api/v1/worker/claim", json={"worker_id": "wb", "tasks": ["b.run"]})).json()
    lease = claim["jobs"][0]["lease"]["token"]
    return {"queued": queued, "scheduled": scheduled, "dead": dead, "running": running_job, "token": lease}


def requests_against(ids: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Every call that names one of B's jobs (method, path, JSON body)."""
    q, s, d, r, token = (ids["queued"]["id"], ids["scheduled"]["id"], ids["dead"]["id"], ids["running"]["id"],
                         ids["token"])  # fmt: skip
    error = {"type": "X", "message": "m"}
    calls: list[tuple[str, str, Any]] = []
    for job in (q, s, d, r):
        calls += [
            ("GET", f"/api/v1/jobs/{job}", None),
            ("POST", f"/api/v1/jobs/{job}/cancel", {"reason": "A was here"}),
            ("POST", f"/api/v1/jobs/{job}/retry", None),
            ("POST", f"/api/v1/jobs/{job}/replay", None),
            ("GET", f"/api/v1/jobs/{job}/stream", None),
            ("GET", f"/api/v1/events/stream?job_id={job}", None),
        ]
    calls += [
        ("POST", f"/api/v1/worker/jobs/{r}/heartbeat", {"token": token}),
        ("POST", f"/api/v1/worker/jobs/{r}/phases", {"token": token, "phases": [{"name": "run"}]}),
        ("POST", f"/api/v1/worker/jobs/{r}/complete", {"token": token, "result": 1}),
        ("POST", f"/api/v1/worker/jobs/{r}/fail", {"token": token, "error": error}),
        ("POST", f"/api/v1/worker/jobs/{r}/release", {"token": token}),
    ]
    return calls


async def snapshot(api: Api) -> tuple[list[dict[str, Any]], int]:
    jobs = await api.engine.list_jobs(JobFilter(tenant="globex", limit=1000))
    return [job_to_json(j) for j in jobs], len(await api.engine.events(0, 10_000, tenant="globex"))


async def test_tenant_a_cannot_see_or_touch_tenant_b(
    api: Api, acme: httpx.AsyncClient, globex: httpx.AsyncClient
) -> None:
    b = await b_world(api, globex)
    await acme.post("/api/v1/jobs", json={"task": "a.task"})
    before = await snapshot(api)
    for method, path, body in requests_against(b):
        theirs = await acme.request(method, path, json=body)
        missing = await acme.request(method, path.replace(_id_in(path, b), MISSING), json=body)
        assert theirs.status_code == 404, (method, path, theirs.text)
        assert theirs.headers["content-type"] == "application/problem+json"
        # Indistinguishable from an id that does not exist (same status, same detail shape).
        assert missing.status_code == 404
        assert theirs.json()["detail"].replace(_id_in(path, b), "X") == missing.json()["detail"].replace(MISSING, "X")
    # Batch forms of the worker protocol refuse B's leases without saying whether they exist.
    token, running = b["token"], b["running"]["id"]
    hb = (await acme.post("/api/v1/worker/heartbeat", json={"leases": [{"job_id": running, "token": token}]})).json()
    assert hb == {"held": [], "lost": [running], "cancel_requested": []}
    report = {"completions": [{"job_id": running, "token": token}], "releases": [{"job_id": running, "token": token}]}
    assert (await acme.post("/api/v1/worker/report", json=report)).json()["refused"] == [running]
    phases = {"updates": [{"job_id": running, "token": token, "phases": [{"name": "run"}]}]}
    assert (await acme.post("/api/v1/worker/phases", json=phases)).json() == {"held": [], "lost": [running]}
    # A's bulk actions and lists never reach B.
    all_b = [b[k]["id"] for k in ("queued", "scheduled", "dead", "running")]
    assert (await acme.post("/api/v1/dead-letter/replay", json={"ids": all_b})).json() == {"replayed": []}
    assert (await acme.post("/api/v1/dead-letter/purge", json={"ids": all_b})).json() == {"purged": 0}
    assert (await acme.post("/api/v1/dead-letter/purge", json={})).json() == {"purged": 0}
    assert (await acme.post("/api/v1/dead-letter/replay", json={})).json() == {"replayed": []}
    claim = await acme.post("/api/v1/worker/claim", json={"worker_id": "wa", "tasks": ["b.task", "b.run"]})
    assert claim.json() == {"jobs": []}
    dep = await acme.post("/api/v1/jobs", json={"task": "a.task", "depends_on": [b["queued"]["id"]]})
    assert dep.status_code == 422 and dep.json()["field"] == "depends_on"
    listings = [
        ("/api/v1/jobs", {"limit": 500}), ("/api/v1/dead-letter", {}), ("/api/v1/events", {"limit": 1000}),
        ("/api/v1/events", {"job_id": b["queued"]["id"]}), ("/api/v1/queues", {}),
    ]  # fmt: skip
    for path, params in listings:
        text = (await acme.get(path, params=params)).text
        assert "globex" not in text and not any(i in text for i in all_b), (path, text)
    queues = (await acme.get("/api/v1/queues")).json()["items"]
    assert [(q["name"], q["counts"]["queued"], q["counts"]["dead"]) for q in queues] == [("default", 1, 0)]
    assert await snapshot(api) == before  # nothing of B changed, not even an event


def _id_in(path: str, b: dict[str, Any]) -> str:
    for key in ("queued", "scheduled", "dead", "running"):
        if b[key]["id"] in path:
            return str(b[key]["id"])
    raise AssertionError(path)


GRAPH = {
    "name": "b-graph",
    "nodes": [{"name": "head", "task": "b.task", "payload": {"secret": 1}}, {"name": "tail", "task": "b.task"}],
    "edges": [["head", "tail"]],
}


async def test_graphs_of_tenant_b_are_invisible_to_tenant_a(
    api: Api, acme: httpx.AsyncClient, globex: httpx.AsyncClient
) -> None:
    """B's graphs, submitted or fired by B's schedule, answer A as a graph that does not exist: list, get (by
    id or prefix), cancel and retry; none of B's graph changes."""
    submitted = (await globex.post("/api/v1/graphs", json=GRAPH)).json()
    schedule = {"name": "b-nightly", "cron": "0 2 * * *", "template": GRAPH}
    assert (await globex.post("/api/v1/schedules", json=schedule)).status_code == 201
    run = (await globex.post("/api/v1/schedules/b-nightly/trigger", json={"reason": "now"})).json()
    fired = (await globex.get(f"/api/v1/graphs/{run['id']}")).json()  # the graph a run fires has its id
    assert fired["name"] == "b-graph" and fired["total"] == 2
    mine = (await acme.post("/api/v1/graphs", json={**GRAPH, "name": "a-graph"})).json()
    before = [(await globex.get(f"/api/v1/graphs/{g}")).json() for g in (submitted["id"], run["id"])]
    for graph_id in (submitted["id"], run["id"]):
        for method, path in [
            ("GET", f"/api/v1/graphs/{graph_id}"), ("GET", f"/api/v1/graphs/{graph_id[:13]}"),
            ("POST", f"/api/v1/graphs/{graph_id}/cancel"), ("POST", f"/api/v1/graphs/{graph_id}/retry"),
            ("GET", f"/api/v1/runs/{graph_id}"),
        ]:  # fmt: skip
            theirs = await acme.request(method, path)
            missing = await acme.request(method, path.replace(graph_id, MISSING).replace(graph_id[:13], MISSING))
            assert (theirs.status_code, missing.status_code) == (404, 404), (method, path, theirs.text)
            assert theirs.headers["content-type"] == "application/problem+json"
    listed = await acme.get("/api/v1/graphs", params={"limit": 500})
    assert [g["id"] for g in listed.json()["items"]] == [mine["id"]]
    assert "globex" not in listed.text and "b-graph" not in listed.text
    after = [(await globex.get(f"/api/v1/graphs/{g}")).json() for g in (submitted["id"], run["id"])]
    assert after == before
    assert [g["state"] for g in after] == ["pending", "pending"]
