"""Schedules whose template is a run request, over HTTP: told apart by its ``mode``; a trigger starts the
request's run (of its stream); a bad one is a 422 problem naming the field."""

from __future__ import annotations

from typing import Any

import httpx

from jobengine.core.ids import short_id

from .conftest import Api, browser

S = "/api/v1/schedules"
SCORE = {"task": "score", "mode": "incremental", "source": "accounts", "items": [3, 1, 2], "segment_size": 2,
         "priority": "high", "environment": {"region": "eu"}, "version": "v2"}  # fmt: skip


def hourly(template: Any = SCORE, name: str = "score-hourly", **fields: Any) -> dict[str, Any]:
    return {"name": name, "cron": "0 * * * *", "template": template, **fields}


async def test_a_schedule_starts_a_run_request(acme: httpx.AsyncClient) -> None:
    created = await acme.post(S, json=hourly())
    assert created.status_code == 201, created.text
    template = created.json()["template"]
    assert (template["mode"], template["source"], template["items"], template["priority"]) == (
        "incremental", "accounts", [3, 1, 2], "high",
    )  # fmt: skip
    run = await acme.post(f"{S}/score-hourly/trigger", json={"reason": "backfill"})
    assert run.status_code == 201, run.text
    shown = (await acme.get(f"/api/v1/runs/{run.json()['id']}")).json()
    assert (shown["trigger"], shown["schedule_id"], shown["summary"]["total"]) == ("manual", "score accounts", 2)
    assert shown["trigger_data"]["schedule_id"] == created.json()["id"]
    assert shown["trigger_data"]["request"]["items"] == [1, 2, 3]
    busy = await acme.post(f"{S}/score-hourly/trigger", json={"reason": "again"})
    assert busy.status_code == 409, busy.text  # the stream's incremental run is unfinished
    # A schedule of a request becomes a schedule of jobs, and back.
    back = await acme.patch(f"{S}/score-hourly", json={"template": {"task": "t"}})
    assert back.status_code == 200 and back.json()["template"]["task"] == "t"
    again = await acme.patch(f"{S}/score-hourly", json={"template": {**SCORE, "mode": "simulate"}})
    assert again.status_code == 200 and again.json()["template"]["mode"] == "simulate"


async def test_a_bad_request_template_is_a_problem_naming_the_field(acme: httpx.AsyncClient) -> None:
    cases = [
        ({**SCORE, "mode": "sometimes"}, {}, "template.request.mode"),
        ({**SCORE, "priority": "urgent"}, {}, "template.request.priority"),
        ({**SCORE, "environment": {"x": 1}}, {}, "template.request.environment.x"),
        ({**SCORE, "run_id": "a"}, {}, "template.request.run_id"),
        ({k: v for k, v in SCORE.items() if k != "items"}, {}, "template.items"),
        ({**SCORE, "planner": "accounts"}, {}, "template.items"),
        (SCORE, {"overlap": "queue"}, "overlap"),
    ]
    for template, fields, field in cases:
        r = await acme.post(S, json=hourly(template, **fields))
        assert r.status_code == 422, (template, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        named = problem.get("field") or problem["errors"][0]["field"]
        assert named == field, (template, problem)
    assert (await acme.get(S)).json()["items"] == []
    await acme.post(S, json=hourly())
    patched = await acme.patch(f"{S}/score-hourly", json={"template": {**SCORE, "segment_size": 0}})
    assert patched.status_code == 422 and "template.request.segment_size" in patched.text


async def test_the_dashboard_lists_the_runs_a_request_schedule_started(api: Api, acme: httpx.AsyncClient) -> None:
    created = (await acme.post(S, json=hourly())).json()
    run = (await acme.post(f"{S}/score-hourly/trigger", json={"reason": "now"})).json()
    async with browser(api, api.keys["acme"]) as ui:
        page = await ui.get(f"/schedules/{created['id']}")
        assert page.status_code == 200 and "score" in page.text
        assert short_id(run["id"]) in page.text, page.text[-1000:]
