"""The jobs, queues, dead-letter, events and health resources, in-process over SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from jobengine.core.states import JobState

from .conftest import Api, MakeApi

PROBLEM = "application/problem+json"


async def dead_job(c: httpx.AsyncClient, task: str = "doomed", queue: str = "default") -> dict[str, Any]:
    """A job of the client's tenant in the dead-letter (claimed over the worker protocol, failed for good)."""
    job = (await c.post("/api/v1/jobs", json={"task": task, "queue": queue})).json()
    claimed = (await c.post("/api/v1/worker/claim", json={"worker_id": "w", "tasks": [task], "queues": [queue]})).json()
    (entry,) = [e for e in claimed["jobs"] if e["job"]["id"] == job["id"]]
    body = {"token": entry["lease"]["token"], "error": {"type": "ValueError", "message": "no"}, "retryable": False}
    assert (await c.post(f"/api/v1/worker/jobs/{job['id']}/fail", json=body)).status_code == 200
    out = (await c.get(f"/api/v1/jobs/{job['id']}")).json()
    assert out["state"] == "dead"
    return out


async def count_jobs(api: Api) -> int:
    return sum((await api.engine.count_jobs()).values())


async def test_enqueue_get_and_list_with_cursor_paging(acme: httpx.AsyncClient) -> None:
    r = await acme.post("/api/v1/jobs", json={"task": "mail.send", "payload": {"to": "a@b.c"}, "priority": 5})
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    job = r.json()
    assert r.headers["location"] == f"/api/v1/jobs/{job['id']}"
    assert (job["tenant"], job["state"], job["priority"], job["payload"]) == ("acme", "queued", 5, {"to": "a@b.c"})
    assert "lease_token" not in str(job)
    assert (await acme.get(f"/api/v1/jobs/{job['id']}")).json() == job
    batch = [{"task": "t", "queue": "q2" if i % 2 else "default"} for i in range(7)]
    r = await acme.post("/api/v1/jobs/batch", json={"jobs": batch})
    assert r.status_code == 201 and r.json()["created"] == [True] * 7
    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 3, "task": "t"}
        if cursor:
            params["cursor"] = cursor
        page = (await acme.get("/api/v1/jobs", params=params)).json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [j["id"] for j in reversed(r.json()["jobs"])]  # newest first, each once
    q2 = (await acme.get("/api/v1/jobs", params={"queue": "q2", "state": ["queued", "running"]})).json()
    assert len(q2["items"]) == 3 and q2["next_cursor"] is None


async def test_a_job_level_idempotency_key_returns_the_existing_job(acme: httpx.AsyncClient) -> None:
    body = {"task": "t", "payload": {"n": 1}, "idempotency_key": "order-7"}
    first = await acme.post("/api/v1/jobs", json=body)
    again = await acme.post("/api/v1/jobs", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    conflict = await acme.post("/api/v1/jobs", json={**body, "payload": {"n": 2}})
    assert conflict.status_code == 409 and conflict.json()["field"] == "idempotency_key"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, "body"),
        (b'{"task": "t", "unknown": 1}', 422, "unknown"),
        (b'{"task": "t", "priority": "5"}', 422, "priority"),
        (b'{"task": "t", "priority": 5000000}', 422, "priority"),
        (b'{"task": "bad name!"}', 422, "task"),
        (b'{"task": "t", "payload": NaN}', 422, "payload"),
        (b'{"task": "t", "payload": "a\\u0000b"}', 422, "payload"),
        (b'{"task": "t", "run_at": "2030-01-01T00:00:00"}', 422, "run_at"),
        (b'{"task": "t", "run_at": "2030-01-01T00:00:00Z", "delay": 5}', 422, "delay"),
        (b'{"task": "t", "depends_on": ["0000-none"]}', 422, "depends_on"),
        (b'{"task": "t", "max_attempts": 0}', 422, "max_attempts"),
        (b"[]", 422, "body"),
        (b'{"task": "t", "payload": ' + b"[" * 100 + b"]" * 100 + b"}", 422, "payload"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "body"),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field_and_writes_nothing(
    api: Api, acme: httpx.AsyncClient, body: bytes, status: int, field: str
) -> None:
    r = await acme.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    assert problem["field"] == field or problem["field"].startswith(field + "."), problem
    assert await count_jobs(api) == 0


async def test_oversized_and_non_json_bodies(make_api: MakeApi) -> None:
    async with make_api(api_max_body_bytes=2048) as api, api.client() as c:
        big = {"task": "t", "payload": "x" * 5000}
        r = await c.post("/api/v1/jobs", json=big)
        assert r.status_code == 413 and r.headers["content-type"] == PROBLEM

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit applies as it streams
            for chunk in (b'{"task": "t", "payload": "', b"y" * 3000, b'"}'):
                yield chunk

        streamed = await c.post("/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        r = await c.post(
            "/api/v1/jobs", content=b"task=t", headers={"content-type": "application/x-www-form-urlencoded"}
        )
        assert r.status_code == 415
        assert await count_jobs(api) == 0


async def test_a_batch_is_all_or_nothing(api: Api, acme: httpx.AsyncClient) -> None:
    jobs = [{"task": "ok"}, {"task": "ok", "depends_on": ["01900000-0000-7000-8000-000000000000"]}]
    r = await acme.post("/api/v1/jobs/batch", json={"jobs": jobs})
    assert r.status_code == 422 and r.json()["field"] == "depends_on"
    assert await count_jobs(api) == 0
    r = await acme.post("/api/v1/jobs/batch", json={"jobs": []})
    assert r.status_code == 422


async def test_cancel_retry_and_replay(acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "t", "delay": 3600.0})).json()
    assert job["state"] == "scheduled"
    cancelled = await acme.post(f"/api/v1/jobs/{job['id']}/cancel", json={"reason": "not needed"})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["reason"] == "not needed"
    again = await acme.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and again.headers["content-type"] == PROBLEM
    assert (await acme.post(f"/api/v1/jobs/{job['id']}/replay")).status_code == 409  # not dead
    retried = await acme.post(f"/api/v1/jobs/{job['id']}/retry")
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    assert (await acme.post(f"/api/v1/jobs/{job['id']}/retry")).status_code == 409
    dead = await dead_job(acme)
    replayed = await acme.post(f"/api/v1/jobs/{dead['id']}/replay")
    assert replayed.status_code == 200 and replayed.json()["state"] == "queued"
    assert replayed.json()["attempt"] == 0
    assert (await acme.post("/api/v1/jobs/01900000-0000-7000-8000-000000000000/cancel")).status_code == 404


async def test_dead_letter_list_replay_and_purge(acme: httpx.AsyncClient) -> None:
    a = await dead_job(acme, "a")
    b = await dead_job(acme, "b", queue="media")
    c = await dead_job(acme, "c")
    listed = (await acme.get("/api/v1/dead-letter")).json()
    assert [j["id"] for j in listed["items"]] == [c["id"], b["id"], a["id"]]
    assert [j["id"] for j in (await acme.get("/api/v1/dead-letter", params={"queue": "media"})).json()["items"]] == [
        b["id"]
    ]
    replayed = (await acme.post("/api/v1/dead-letter/replay", json={"ids": [a["id"], "nope"]})).json()
    assert [j["id"] for j in replayed["replayed"]] == [a["id"]]
    assert replayed["replayed"][0]["state"] == "queued"
    purged = (await acme.post("/api/v1/dead-letter/purge", json={"queue": "media"})).json()
    assert purged == {"purged": 1}
    assert (await acme.get(f"/api/v1/jobs/{b['id']}")).status_code == 404
    assert (await acme.post("/api/v1/dead-letter/purge", json={})).json() == {"purged": 1}  # c
    assert (await acme.get("/api/v1/dead-letter")).json()["items"] == []


async def test_queue_depth_pause_resume_and_limits(api: Api, acme: httpx.AsyncClient) -> None:
    for _ in range(4):
        await acme.post("/api/v1/jobs", json={"task": "t", "queue": "media"})
    q = (await acme.get("/api/v1/queues/media")).json()
    assert (q["depth"], q["counts"]["queued"], q["paused"], q["concurrency"]) == (4, 4, False, None)
    paused = await acme.post("/api/v1/queues/media/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    claim = {"worker_id": "w", "queues": ["media"], "limit": 10}
    assert (await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"] == []
    await acme.post("/api/v1/queues/media/resume")
    limited = await acme.put("/api/v1/queues/media/limits", json={"concurrency": 3})
    assert limited.json()["concurrency"] == 3
    assert len((await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"]) == 3
    assert (await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"] == []  # at its limit
    await acme.put("/api/v1/queues/media/limits", json={"concurrency": None})
    assert len((await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"]) == 1
    listed = (await acme.get("/api/v1/queues")).json()["items"]
    assert [(q["name"], q["counts"]["running"]) for q in listed] == [("media", 4)]


async def test_events_after_an_id_with_filters(acme: httpx.AsyncClient) -> None:
    a = (await acme.post("/api/v1/jobs", json={"task": "t", "queue": "q1"})).json()
    b = (await acme.post("/api/v1/jobs", json={"task": "t", "queue": "q2"})).json()
    await acme.post(f"/api/v1/jobs/{a['id']}/cancel")
    page = (await acme.get("/api/v1/events")).json()
    assert [(e["type"], e["job_id"]) for e in page["items"]] == [
        ("job.enqueued", a["id"]), ("job.enqueued", b["id"]), ("job.cancelled", a["id"]),
    ]  # fmt: skip
    assert page["last_id"] == page["items"][-1]["id"]
    first = page["items"][0]["id"]
    assert [e["id"] for e in (await acme.get("/api/v1/events", params={"after": first})).json()["items"]] == [
        e["id"] for e in page["items"][1:]
    ]
    only = (await acme.get("/api/v1/events", params={"type": "job.cancelled"})).json()
    assert [e["type"] for e in only["items"]] == ["job.cancelled"]
    q2 = (await acme.get("/api/v1/events", params={"queue": "q2", "type": "job.*"})).json()
    assert [e["job_id"] for e in q2["items"]] == [b["id"]]
    per_job = (await acme.get("/api/v1/events", params={"job_id": a["id"], "limit": 1})).json()
    assert len(per_job["items"]) == 1 and per_job["items"][0]["job_id"] == a["id"]


async def test_health_readiness_and_metrics(api: Api, acme: httpx.AsyncClient) -> None:
    async with api.client(key="") as anonymous:
        assert (await anonymous.get("/healthz")).json()["status"] == "ok"
        ready = await anonymous.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["store"]["ready"] is True
        assert {"transport:planner", "transport:runner"} <= set(ready.json()["checks"])
        assert (await anonymous.get("/metrics")).status_code == 401

    async def failing() -> str:
        raise RuntimeError("planner is down")

    api.engine.health.add("planner", failing)
    not_ready = await acme.get("/readyz")
    assert not_ready.status_code == 503 and not_ready.json()["checks"]["planner"]["ready"] is False
    api.engine.health.remove("planner")
    await dead_job(acme)
    await acme.post("/api/v1/jobs", json={"task": "t"})
    text = (await acme.get("/metrics")).text
    assert 'jobengine_jobs{queue="default",state="queued"} 1.0' in text
    assert 'jobengine_jobs{queue="default",state="dead"} 1.0' in text
    assert "jobengine_dead_letters 1.0" in text
    assert 'jobengine_job_outcomes_total{outcome="dead",queue="default"} 1.0' in text
    assert 'jobengine_http_requests_total{method="POST",route="/api/v1/jobs",status="201"}' in text
    assert "jobengine_http_request_duration_seconds_bucket" in text
    assert "jobengine_queue_depth{" in text  # the queue transports' registry, served beside the API's


async def test_missing_wrong_or_revoked_keys_are_401_and_scopes_403(api: Api) -> None:
    reader = await api.key("acme", "jobs:read")
    async with api.client(key="") as none, api.client(key="je_000000000000_" + "x" * 43) as wrong:
        for c in (none, wrong):
            r = await c.get("/api/v1/jobs")
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
            assert r.headers["content-type"] == PROBLEM
    async with api.client(key=reader) as c:
        assert (await c.get("/api/v1/jobs")).status_code == 200
        r = await c.post("/api/v1/jobs", json={"task": "t"})
        assert r.status_code == 403 and r.json()["required_scope"] == "jobs:write"
        assert (await c.post("/api/v1/worker/claim", json={"worker_id": "w"})).status_code == 403
        assert (await c.post("/api/v1/queues/default/pause")).status_code == 403
        await api.engine.keys.revoke(reader.split("_")[1])  # the app's key cache forgets it at once
        assert (await c.get("/api/v1/jobs")).status_code == 401
    async with api.client(key=reader, tenant="acme") as c:
        c.headers.pop("Authorization")
        c.headers["X-API-Key"] = api.keys["acme"]
        assert (await c.get("/api/v1/jobs")).status_code == 200


async def test_openapi_documents_problem_responses(acme: httpx.AsyncClient) -> None:
    spec = (await acme.get("/openapi.json")).json()
    op = spec["paths"]["/api/v1/jobs"]["post"]
    assert set(op["responses"]) >= {"201", "400", "401", "403", "409", "413", "415", "422"}
    assert list(op["responses"]["422"]["content"]) == [PROBLEM]
    assert "Problem" in spec["components"]["schemas"]
    assert (await acme.get("/docs")).status_code == 200
    assert JobState.QUEUED.value in str(spec["components"]["schemas"]["JobState"])


async def test_a_payload_that_cannot_be_a_registered_tasks_arguments_is_a_problem_naming_the_field(
    api: Api, acme: httpx.AsyncClient
) -> None:
    @api.engine.task
    async def send_welcome(email: str, lang: str = "en") -> None: ...

    for payload, field in (({"emial": "x"}, "payload.email"), ({"email": "x", "lnag": "fr"}, "payload.lnag")):
        r = await acme.post("/api/v1/jobs", json={"task": "send_welcome", "payload": payload})
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, r.text
        assert r.json()["field"] == field
    assert await count_jobs(api) == 0
    ok = await acme.post("/api/v1/jobs", json={"task": "send_welcome", "payload": {"email": "ada@example.com"}})
    assert ok.status_code == 201 and ok.json()["payload"] == {"email": "ada@example.com"}
