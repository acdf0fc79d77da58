"""Run requests over HTTP: ``POST /api/v1/runs`` with a task and items, idempotent run ids, and
``POST /api/v1/runs/preview`` for a request or a schedule."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion

from .conftest import Api, browser, form

R = "/api/v1/runs"


async def test_a_run_request_is_idempotent_by_run_id(acme: httpx.AsyncClient) -> None:
    body = {"task": "score", "items": ["b", "a", "b"], "mode": "full", "priority": "high", "run_id": "night-1",
            "version": "v2", "environment": {"region": "eu"}, "segment_size": 1}  # fmt: skip
    r = await acme.post(R, json=body)
    assert r.status_code == 201, r.text
    run = r.json()
    assert (run["id"], run["trigger"], run["items"], run["summary"]["total"]) == ("night-1", "request", 2, 2)
    assert r.headers["location"] == f"{R}/night-1"
    again = await acme.post(R, json={**body, "items": ["a", "b"]})  # the same set of items
    assert again.status_code == 201 and again.json()["id"] == "night-1"
    assert len((await acme.get(R)).json()["items"]) == 1
    conflict = await acme.post(R, json={**body, "items": ["a"]})
    assert conflict.status_code == 409, conflict.text
    shown = (await acme.get(f"{R}/night-1")).json()
    assert shown["trigger_data"]["request"]["items"] == ["a", "b"]
    jobs = (await acme.get(f"{R}/night-1/jobs")).json()["jobs"]
    assert {j["priority"] for j in jobs} == {1000}
    assert [j["payload"]["items"] for j in jobs] == [["a"], ["b"]]


async def test_bad_run_requests_are_422_naming_the_field(acme: httpx.AsyncClient) -> None:
    for body in ({"task": "score", "mode": "sometimes"}, {"task": "score", "run_id": "a b"},
                 {"task": "score", "priority": "urgent"}, {"task": "score", "environment": {"x": 1}}):  # fmt: skip
        r = await acme.post(R, json=body)
        assert r.status_code == 422, (body, r.text)
    assert (await acme.post(R, json={"schedule": "nope", "reason": "x"})).status_code == 404


async def test_preview_of_a_request_and_of_a_schedule(acme: httpx.AsyncClient) -> None:
    body = {"task": "score", "items": list(range(30)), "mode": "incremental", "segment_size": 10}
    r = await acme.post(f"{R}/preview", json=body)
    assert r.status_code == 200, r.text
    p = r.json()
    assert (p["todo"], p["segments"], p["cursor"], p["cursor_to"], p["sample"][:2]) == (30, 3, None, 29, [0, 1])
    assert (await acme.get(R)).json()["items"] == []  # a preview writes nothing
    await acme.post("/api/v1/schedules", json={"name": "fan", "every": 60, "template": {"task": "t", "items": [1, 2]}})
    sim = (await acme.post(f"{R}/preview", json={"schedule": "fan", "count": 2})).json()
    assert len(sim["fire_times"]) == 2 and sim["runs"][0]["items"] == [1, 1]
    assert (await acme.get(R)).json()["items"] == []


async def test_a_request_runs_pages_render(api: Api, acme: httpx.AsyncClient) -> None:
    run = (await acme.post(R, json={"task": "score", "items": [1, 2], "source": "accounts"})).json()
    async with browser(api, api.keys["acme"]) as ui:
        for path in ("/runs", f"/runs/{run['id']}"):
            r = await ui.get(path)
            assert r.status_code == 200 and run["id"] in r.text, (path, r.text[-500:])


async def finish(api: Api, result: Callable[[int], int]) -> None:
    """Complete every queued job as a worker would, each item's result ``result(item)``."""
    jobs = await api.engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)
    await api.engine.transitions.complete_jobs([
        Completion(j.id, j.lease_token or "", [result(i) for i in j.payload["items"]]) for j in jobs
    ])  # fmt: skip


async def test_a_simulate_runs_diff_and_a_replay(api: Api, acme: httpx.AsyncClient) -> None:
    body = {"task": "score", "items": [1, 2, 3], "segment_size": 2}
    full = (await acme.post(R, json=body)).json()
    await finish(api, lambda i: i)
    assert (await acme.get(f"{R}/{full['id']}/diff")).status_code == 409  # a full run has no diff
    assert (await acme.get(f"{R}/nope/diff")).status_code == 404
    sim = (await acme.post(R, json={**body, "items": [2, 3, 4], "mode": "simulate"})).json()
    early = await acme.get(f"{R}/{sim['id']}/diff")
    assert early.status_code == 409 and "ended" in early.json()["detail"]
    await finish(api, lambda i: i * 10 if i == 3 else i)
    r = await acme.get(f"{R}/{sim['id']}/diff")
    assert r.status_code == 200, r.text
    diff = r.json()
    assert (diff["base_run_id"], diff["counts"]) == (full["id"], {"same": 1, "changed": 1, "new": 1, "gone": 1})
    assert [(e["item"], e["change"], e["before"], e["after"]) for e in diff["entries"]] == [
        (1, "gone", 1, None), (3, "changed", 3, 30), (4, "new", None, 4)
    ]  # fmt: skip
    assert len((await acme.get(f"{R}/{sim['id']}/diff", params={"same": "true"})).json()["entries"]) == 4

    replay = await acme.post(f"{R}/{full['id']}/replay", json={"reason": "again"})
    assert replay.status_code == 201, replay.text
    again = replay.json()
    assert (again["parent_id"], again["state"], again["items"], again["reason"]) == (full["id"], "queued", 3, "again")
    assert (await acme.post(f"{R}/{again['id']}/replay")).status_code == 409  # not ended yet
    assert (await acme.post(f"{R}/nope/replay")).status_code == 404


async def test_the_dashboards_run_forms_refuse_bad_input_and_write_only_when_confirmed(
    api: Api, acme: httpx.AsyncClient
) -> None:
    async with browser(api, api.keys["acme"]) as ui:
        assert (await ui.get("/runs", params={"mode": "sometimes"})).status_code == 422
        assert (await ui.get("/runs/new")).status_code == 200
        fields = {"task": "score", "mode": "incremental", "items": "a\nb\n3", "segment_size": "2"}
        r = await ui.post("/runs/new/preview", data=form(ui, **fields))
        assert r.status_code == 200 and 'data-count="todo">3<' in r.text, r.text[-800:]
        assert (await acme.get(R)).json()["items"] == []  # the preview wrote nothing
        for bad, field in (({"segment_size": "x"}, "segment_size"), ({"mode": "often"}, "mode"),
                           ({"items": "[1,"}, "items"), ({"task": ""}, "task")):  # fmt: skip
            r = await ui.post("/runs/new/preview", data=form(ui, **{**fields, **bad}))
            assert r.status_code == 422 and f"{field}: " in r.text, (bad, r.text[-800:])
        assert (await ui.post("/runs/new", data=form(ui, **fields))).status_code == 422  # not confirmed
        r = await ui.post("/runs/new", data=form(ui, **fields, confirm="start"))
        assert r.status_code == 303, r.text
        run = (await acme.get(R)).json()["items"][0]
        assert (run["mode"], run["items"], r.headers["location"]) == (
            "incremental",
            3,
            f"/runs/{run['id']}?done=run+started",
        )
        again = await ui.post("/runs/new", data=form(ui, **fields, confirm="start"))
        assert again.status_code == 409 and run["id"] in again.text  # one incremental run of a stream at a time
        assert (await ui.post("/runs/new", data={**fields, "confirm": "start"})).status_code == 403  # no CSRF token
        assert (await ui.get("/schedules/nope/trigger")).status_code == 404
        r = await ui.get(f"/runs/{run['id']}", params={"change": "same"})
        assert r.status_code == 200 and 'id="diff-title"' not in r.text  # only a simulate run has a diff
        sim = (await acme.post(R, json={"task": "score", "items": [1], "mode": "simulate"})).json()
        r = await ui.get(f"/runs/{sim['id']}")
        assert r.status_code == 200 and "The diff is ready once this simulate run ended" in r.text
