"""Schedules whose template is a graph, over HTTP: the template is the body of ``POST /api/v1/graphs``; a
run fires a graph with the run's id; a bad graph template is a 422 problem naming the field."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import Api, browser

S = "/api/v1/schedules"

ETL = {
    "name": "etl",
    "nodes": [
        {"name": "extract", "task": "etl.extract", "payload": {"day": "today"}},
        {"name": "load", "task": "etl.load", "max_attempts": 2, "policy": "continue"},
        {"name": "cleanup", "task": "etl.cleanup", "policy": "always"},
    ],
    "edges": [["extract", "load"], ["load", "cleanup"]],
}


def nightly(template: Any = ETL, name: str = "nightly") -> dict[str, Any]:
    return {"name": name, "cron": "0 2 * * *", "template": template}


async def test_a_schedule_fires_a_graph(acme: httpx.AsyncClient) -> None:
    created = await acme.post(S, json=nightly())
    assert created.status_code == 201, created.text
    template = created.json()["template"]
    assert template["name"] == "etl" and template["edges"] == ETL["edges"]
    assert [n["name"] for n in template["nodes"]] == ["extract", "load", "cleanup"]
    assert template["nodes"][1]["policy"] == "continue" and template["nodes"][1]["max_attempts"] == 2
    sim = (await acme.post(f"{S}/nightly/simulate", json={"count": 2})).json()
    assert [[j["task"] for j in r["jobs"]] for r in sim["runs"]] == [["etl.extract", "etl.load", "etl.cleanup"]] * 2
    run = await acme.post(f"{S}/nightly/trigger", json={"reason": "backfill"})
    assert run.status_code == 201, run.text
    assert run.json()["summary"]["total"] == 3
    graph = (await acme.get(f"/api/v1/graphs/{run.json()['id']}")).json()
    assert (graph["name"], graph["total"], graph["state"]) == ("etl", 3, "pending")
    nodes = {n["name"]: n for n in graph["nodes"]}
    assert nodes["load"]["parents"] == ["extract"] and nodes["cleanup"]["policy"] == "always"
    assert {n["job"]["run_id"] for n in graph["nodes"]} == {run.json()["id"]}
    jobs = (await acme.get(f"/api/v1/runs/{run.json()['id']}/jobs")).json()
    assert sorted(j["graph_id"] for j in jobs["jobs"]) == [graph["id"]] * 3
    # A schedule of jobs becomes a schedule of a graph, and back.
    await acme.post(S, json=nightly({"task": "t"}, name="plain"))
    patched = await acme.patch(f"{S}/plain", json={"template": ETL})
    assert patched.status_code == 200 and patched.json()["template"]["name"] == "etl"
    back = await acme.patch(f"{S}/plain", json={"template": {"task": "t2"}})
    assert back.status_code == 200 and back.json()["template"]["task"] == "t2"


async def test_a_bad_graph_template_is_a_problem_naming_the_field(acme: httpx.AsyncClient) -> None:
    cases = [
        ({"nodes": [{"name": "a"}]}, "template.graph.nodes.0.task"),
        ({"nodes": []}, "template.graph.nodes"),
        ({"nodes": [{"name": "a", "task": "t"}], "edges": [["a", "b"]]}, "template.edges.0"),
        ({"nodes": [{"name": "a", "task": "t"}, {"name": "b", "task": "t"}], "edges": [["a", "b"], ["b", "a"]]},
         "template.edges"),
        ({"nodes": [{"name": "a", "task": "t", "policy": "maybe"}]}, "template.graph.nodes.0.policy"),
        ({"nodes": [{"name": "a", "task": "t"}], "colour": "red"}, "template.graph.colour"),
    ]  # fmt: skip
    for template, field in cases:
        r = await acme.post(S, json=nightly(template))
        assert r.status_code == 422, (template, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["field"] == field, (template, r.json())
    assert (await acme.get(S)).json()["items"] == []


async def test_the_dashboard_shows_the_graph_a_schedule_fires(api: Api, acme: httpx.AsyncClient) -> None:
    created = (await acme.post(S, json=nightly())).json()
    async with browser(api, api.keys["acme"]) as ui:
        for path in ("/schedules", f"/schedules/{created['id']}"):
            r = await ui.get(path)
            assert r.status_code == 200 and "graph etl" in r.text, (path, r.text[-500:])
