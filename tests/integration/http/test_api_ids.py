"""Every id the HTTP API takes accepts a unique prefix, as a job's does, on SQLite and on PostgreSQL: runs,
schedules, webhook endpoints and deliveries, failure signatures. A prefix several ids start with is a 409
naming them; one shorter than eight characters a 404 that says so; another tenant's id stays a 404."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from jobengine.core.ids import short_id
from jobengine.core.selection import MIN_PREFIX
from jobengine.secretbox import new_key
from jobengine.webhooks.dispatcher import WebhookDispatcher
from tests.support.ids import shared_prefix

from .conftest import Api, MakeApi

S = "/api/v1/schedules"
W = "/api/v1/webhooks"


@pytest.fixture(params=["sqlite", "postgres"])
async def served(request: pytest.FixtureRequest, make_api: MakeApi) -> AsyncIterator[Api]:
    overrides: dict[str, object] = {"webhook_allow_hosts": ("127.0.0.1/32",)}
    if request.param == "postgres":
        overrides["database"] = request.getfixturevalue("postgres_dsn")
        overrides["secret_keys"] = (new_key(),)  # webhook secrets at rest: required on PostgreSQL
    async with make_api(**overrides) as api:
        yield api


async def assert_prefixes(client: httpx.AsyncClient, base: str, ids: list[str], field: str) -> None:
    """``base/<id>`` answers by a short id, 409 for a prefix several ids share, 404 for a short prefix."""
    got = await client.get(f"{base}/{short_id(ids[0])}")
    assert got.status_code == 200 and got.json()["id"] == ids[0], got.text
    prefix, pair = shared_prefix(ids)
    ambiguous = await client.get(f"{base}/{prefix}")
    assert ambiguous.status_code == 409 and ambiguous.headers["content-type"] == "application/problem+json"
    problem = ambiguous.json()
    assert problem["field"] == field and pair <= set(problem["candidates"]), problem
    assert all(c.startswith(prefix) for c in problem["candidates"]) and "give more characters" in problem["detail"]
    short = await client.get(f"{base}/{ids[0][: MIN_PREFIX - 1]}")
    assert short.status_code == 404 and f"at least {MIN_PREFIX} characters" in short.json()["detail"], short.text


async def test_schedules_and_runs_answer_to_a_unique_prefix(served: Api) -> None:
    async with served.client() as acme, served.client(tenant="globex") as globex:
        made = [await acme.post(S, json={"name": f"s{i}", "every": "1h", "template": {"task": "t"}}) for i in range(3)]
        schedules = [r.json()["id"] for r in made]
        await assert_prefixes(acme, S, schedules, "schedule_id")
        paused = await acme.post(f"{S}/{short_id(schedules[1])}/pause")
        assert paused.status_code == 200 and paused.json()["id"] == schedules[1] and not paused.json()["enabled"]
        assert (await globex.get(f"{S}/{short_id(schedules[0])}")).status_code == 404

        trigger = f"{S}/{short_id(schedules[0])}/trigger"
        runs = [(await acme.post(trigger, json={"reason": "by prefix"})).json()["id"] for _ in range(3)]
        await assert_prefixes(acme, "/api/v1/runs", runs, "run_id")
        jobs = await acme.get(f"/api/v1/runs/{short_id(runs[0])}/jobs")
        assert jobs.status_code == 200 and {j["run_id"] for j in jobs.json()["jobs"]} == {runs[0]}
        cancelled = await acme.post(f"/api/v1/runs/{short_id(runs[0])}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["id"] == runs[0], cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        retried = await acme.post(f"/api/v1/runs/{short_id(runs[0])}/retry")
        assert retried.status_code == 201 and retried.json()["parent_id"] == runs[0]
        assert (await globex.get(f"/api/v1/runs/{short_id(runs[0])}")).status_code == 404


async def test_webhook_endpoints_and_deliveries_answer_to_a_unique_prefix(served: Api) -> None:
    async with served.client() as acme, served.client(tenant="globex") as globex:
        made = [await acme.post(f"{W}/endpoints", json={"url": "http://127.0.0.1:9/hook"}) for _ in range(3)]
        endpoints = [r.json()["id"] for r in made]
        assert all(e.startswith("we_") and short_id(e) == e[:26] for e in endpoints)
        await assert_prefixes(acme, f"{W}/endpoints", endpoints, "endpoint_id")
        disabled = await acme.post(f"{W}/endpoints/{short_id(endpoints[2])}/disable")
        assert disabled.status_code == 200 and disabled.json()["id"] == endpoints[2]
        assert (await globex.get(f"{W}/endpoints/{short_id(endpoints[0])}")).status_code == 404

        assert (await acme.post("/api/v1/jobs", json={"task": "t"})).status_code == 201
        assert await WebhookDispatcher(served.engine).fan_out() > 0  # a delivery of job.created per endpoint
        listed = await acme.get(f"{W}/deliveries", params={"endpoint_id": short_id(endpoints[0])})
        deliveries = [d["id"] for d in listed.json()["items"]]
        assert deliveries and {d["endpoint_id"] for d in listed.json()["items"]} == {endpoints[0]}, listed.text
        everyone = [d["id"] for d in (await acme.get(f"{W}/deliveries")).json()["items"]]
        await assert_prefixes(acme, f"{W}/deliveries", sorted(everyone), "delivery_id")
        resent = await acme.post(f"{W}/deliveries/{short_id(deliveries[0])}/resend")
        assert resent.status_code == 202 and resent.json()["id"] == deliveries[0], resent.text
        attempts = await acme.get(f"{W}/deliveries/{short_id(deliveries[0])}/attempts")
        assert attempts.status_code == 200
        deleted = await acme.delete(f"{W}/endpoints/{short_id(endpoints[1])}")
        assert deleted.status_code == 204
        assert (await acme.get(f"{W}/endpoints/{endpoints[1]}")).status_code == 404


async def test_a_failure_signature_answers_to_a_unique_prefix(served: Api) -> None:
    async with served.client() as acme:
        job = (await acme.post("/api/v1/jobs", json={"task": "parse", "max_attempts": 5})).json()
        [entry] = (await acme.post("/api/v1/worker/claim", json={"worker_id": "w", "tasks": ["parse"]})).json()["jobs"]
        error = {"type": "ValueError", "message": "bad row", "traceback": None}
        body = {"token": entry["lease"]["token"], "error": error, "retry_delay": 3600.0}
        assert (await acme.post(f"/api/v1/worker/jobs/{job['id']}/fail", json=body)).status_code == 200
        [sig] = (await acme.get("/api/v1/signatures")).json()["items"]
        key = sig["key"]
        found = await acme.get(f"/api/v1/signatures/{key[:MIN_PREFIX]}")
        assert found.status_code == 200 and found.json()["key"] == key, found.text
        patched = await acme.patch(f"/api/v1/signatures/{key[:MIN_PREFIX]}", json={"status": "resolved"})
        assert patched.status_code == 200 and patched.json()["key"] == key and patched.json()["status"] == "resolved"
        short = await acme.get(f"/api/v1/signatures/{key[: MIN_PREFIX - 1]}")
        assert short.status_code == 404 and f"at least {MIN_PREFIX} characters" in short.json()["detail"]
