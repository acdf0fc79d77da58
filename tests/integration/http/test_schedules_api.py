"""Schedules, runs and failure signatures over HTTP (the scheduler's engine facade), tenant-scoped."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import Api

S = "/api/v1/schedules"


def hourly(name: str = "digest", **extra: Any) -> dict[str, Any]:
    return {"name": name, "cron": "0 * * * *", "template": {"task": "mail.digest", "payload": {"to": "ops"}}, **extra}


async def test_schedule_crud_pause_resume_and_simulate(acme: httpx.AsyncClient) -> None:
    r = await acme.post(S, json=hourly(timezone="Europe/Paris"))
    assert r.status_code == 201, r.text
    created = r.json()
    assert (created["tenant"], created["name"], created["enabled"]) == ("acme", "digest", True)
    assert created["cron"] == "0 * * * *"
    assert created["created_by"].startswith("key:") and created["next_fire_at"]
    assert r.headers["location"] == f"{S}/{created['id']}"
    assert (await acme.get(f"{S}/{created['id']}")).json() == created
    assert (await acme.get(f"{S}/digest")).json()["id"] == created["id"]  # by name
    assert [s["id"] for s in (await acme.get(S)).json()["items"]] == [created["id"]]
    duplicate = await acme.post(S, json=hourly())
    assert duplicate.status_code == 409
    bad = await acme.post(S, json=hourly(name="bad", cron="61 * * * *"))
    assert bad.status_code == 422 and bad.json()["field"] == "cron"
    both = await acme.post(S, json=hourly(name="both", every="30s"))
    assert both.status_code == 422
    changed = await acme.patch(f"{S}/digest", json={"every": "30m"})
    assert changed.status_code == 200 and changed.json()["every"] == 1800.0 and changed.json()["cron"] is None
    assert changed.json()["version"] == 2
    paused = (await acme.post(f"{S}/digest/pause")).json()
    assert paused["enabled"] is False and paused["next_fire_at"] is None
    resumed = (await acme.post(f"{S}/digest/resume")).json()
    assert resumed["enabled"] is True and resumed["next_fire_at"]
    sim = (await acme.post(f"{S}/digest/simulate", json={"count": 3})).json()
    assert len(sim["fire_times"]) == 3 and len(sim["runs"]) == 3
    assert sim["runs"][0]["jobs"][0]["task"] == "mail.digest"
    proposed = {"schedule": hourly("draft", template={"task": "t", "items": [1, 2, 3], "segment_size": 2}), "count": 2}
    sim = (await acme.post(f"{S}/simulate", json=proposed)).json()
    assert [len(r["jobs"]) for r in sim["runs"]] == [2, 2] and sim["runs"][0]["items"] == [2, 1]
    assert (await acme.get(f"{S}/draft")).status_code == 404  # a simulation writes nothing
    assert (await acme.delete(f"{S}/digest")).status_code == 204
    assert (await acme.get(f"{S}/digest")).status_code == 404


async def test_trigger_runs_their_jobs_cancel_and_retry(acme: httpx.AsyncClient) -> None:
    await acme.post(S, json=hourly("fan", template={"task": "t", "items": [1, 2, 3, 4], "segment_size": 2}))
    r = await acme.post(f"{S}/fan/trigger", json={"reason": "backfill"})
    assert r.status_code == 201, r.text
    run = r.json()
    assert (run["trigger"], run["reason"], run["summary"]["total"]) == ("manual", "backfill", 2)
    assert (await acme.get(f"/api/v1/runs/{run['id']}")).json()["id"] == run["id"]
    jobs = (await acme.get(f"/api/v1/runs/{run['id']}/jobs")).json()
    assert [s["items"] for s in jobs["segments"]] == [2, 2]
    assert {j["run_id"] for j in jobs["jobs"]} == {run["id"]}
    again = await acme.post("/api/v1/runs", json={"schedule": "fan", "reason": "again"})
    assert again.status_code == 201
    listed = (await acme.get("/api/v1/runs")).json()
    assert [r["id"] for r in listed["items"]] == [again.json()["id"], run["id"]]
    cancelled = await acme.post(f"/api/v1/runs/{run['id']}/cancel", json={"reason": "wrong data"})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert (await acme.post(f"/api/v1/runs/{run['id']}/cancel")).status_code == 409
    retry = await acme.post(f"/api/v1/runs/{run['id']}/retry", json={"reason": "fixed"})
    assert retry.status_code == 201 and retry.json()["parent_id"] == run["id"]
    assert retry.json()["trigger"] == "retry"
    only = (await acme.get("/api/v1/runs", params={"state": "cancelled"})).json()["items"]
    assert [r["id"] for r in only] == [run["id"]]
    events = (await acme.get("/api/v1/events", params={"run_id": run["id"], "limit": 1000})).json()["items"]
    assert {e["job_id"] for e in events if e["job_id"]} == {j["id"] for j in jobs["jobs"]}
    assert any(e["type"].startswith("run.") for e in events)
    assert all(e["data"].get("run_id") in (None, run["id"]) for e in events)


async def test_failure_signatures_are_listed_and_their_status_changed(acme: httpx.AsyncClient) -> None:
    for _ in range(2):
        job = (await acme.post("/api/v1/jobs", json={"task": "parse", "max_attempts": 5})).json()
        [entry] = (await acme.post("/api/v1/worker/claim", json={"worker_id": "w", "tasks": ["parse"]})).json()["jobs"]
        error = {"type": "ValueError", "message": f"bad row {job['id']}", "traceback": None}
        body = {"token": entry["lease"]["token"], "error": error, "retry_delay": 3600.0}
        assert (await acme.post(f"/api/v1/worker/jobs/{job['id']}/fail", json=body)).status_code == 200
    [sig] = (await acme.get("/api/v1/signatures")).json()["items"]
    assert (sig["error_type"], sig["occurrences"], sig["status"], sig["task"]) == ("ValueError", 2, "active", "parse")
    assert "<uuid>" in sig["message"] or "bad row" in sig["message"]
    assert (await acme.get(f"/api/v1/signatures/{sig['key']}")).json()["key"] == sig["key"]
    patched = await acme.patch(f"/api/v1/signatures/{sig['key']}", json={"status": "resolved", "non_retryable": True})
    assert patched.status_code == 200
    assert (patched.json()["status"], patched.json()["non_retryable"]) == ("resolved", True)
    assert (await acme.get("/api/v1/signatures", params={"status": "active"})).json()["items"] == []
    assert (await acme.get("/api/v1/signatures/0000000000000000")).status_code == 404


async def test_another_tenants_schedules_runs_and_signatures_answer_404(api: Api, globex: httpx.AsyncClient) -> None:
    await globex.post(S, json=hourly("theirs"))
    run = (await globex.post(f"{S}/theirs/trigger", json={"reason": "x"})).json()
    schedule_id = (await globex.get(f"{S}/theirs")).json()["id"]
    async with api.client(tenant="acme") as acme:
        for method, path, body in [
            ("GET", f"{S}/theirs", None), ("GET", f"{S}/{schedule_id}", None),
            ("PATCH", f"{S}/{schedule_id}", {"enabled": False}), ("DELETE", f"{S}/{schedule_id}", None),
            ("POST", f"{S}/{schedule_id}/pause", None), ("POST", f"{S}/{schedule_id}/resume", None),
            ("POST", f"{S}/{schedule_id}/trigger", {"reason": "mine now"}), ("POST", f"{S}/{schedule_id}/simulate", {}),
            ("POST", "/api/v1/runs", {"schedule": schedule_id, "reason": "x"}),
            ("GET", f"/api/v1/runs/{run['id']}", None), ("GET", f"/api/v1/runs/{run['id']}/jobs", None),
            ("POST", f"/api/v1/runs/{run['id']}/cancel", None), ("POST", f"/api/v1/runs/{run['id']}/retry", None),
            ("GET", f"/api/v1/events/stream?run_id={run['id']}", None),
        ]:  # fmt: skip
            r = await acme.request(method, path, json=body)
            assert r.status_code == 404, (method, path, r.text)
        assert (await acme.get(S)).json()["items"] == []
        assert (await acme.get("/api/v1/runs")).json()["items"] == []
        assert (await acme.get("/api/v1/events", params={"run_id": run["id"]})).json()["items"] == []
    after = (await globex.get(f"{S}/theirs")).json()
    assert after["enabled"] is True and after["version"] == 1
    assert (await globex.get(f"/api/v1/runs/{run['id']}")).json()["state"] == run["state"]


async def test_schedule_scopes(api: Api) -> None:
    reader = await api.key("acme", "schedules:read")
    async with api.client(key=reader) as c:
        assert (await c.get(S)).status_code == 200
        assert (await c.post(S, json=hourly())).status_code == 403
        assert (await c.get("/api/v1/jobs")).status_code == 403
