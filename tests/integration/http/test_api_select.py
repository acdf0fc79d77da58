"""The HTTP API's id prefixes, job search and bulk actions, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from jobengine.core.ids import short_id
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings


@pytest.fixture(params=["sqlite", "postgres"])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    database = str(tmp_path / "api.db") if request.param == "sqlite" else request.getfixturevalue("postgres_dsn")
    settings = Settings(database=database, claim_max_wait=0.5)
    async with Engine.from_settings(settings) as engine:
        key = (await engine.keys.create("acme", ["admin"]))[1]
        app = create_app(engine, settings)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers) as c:
            yield c


async def batch(client: httpx.AsyncClient, *jobs: dict[str, object]) -> list[dict[str, object]]:
    answer = await client.post("/api/v1/jobs/batch", json={"jobs": list(jobs)})
    assert answer.status_code == 201, answer.text
    return list(answer.json()["jobs"])


async def test_a_unique_prefix_finds_a_job_and_an_ambiguous_one_names_candidates(client: httpx.AsyncClient) -> None:
    jobs = await batch(client, *[{"task": "t"} for _ in range(3)])
    first = str(jobs[0]["id"])
    got = await client.get(f"/api/v1/jobs/{short_id(first)}")
    assert got.status_code == 200 and got.json()["id"] == first
    common = first[:14]  # the millisecond: shared by jobs of one batch
    if all(str(j["id"]).startswith(common) for j in jobs):
        ambiguous = await client.get(f"/api/v1/jobs/{common}")
        assert ambiguous.status_code == 409
        problem = ambiguous.json()
        assert problem["field"] == "job_id" and set(problem["candidates"]) == {j["id"] for j in jobs}
    too_short = await client.get(f"/api/v1/jobs/{first[:7]}")
    assert too_short.status_code == 404
    cancelled = await client.post(f"/api/v1/jobs/{short_id(first)}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"


async def test_the_job_list_searches_and_refuses_unknown_parameters(client: httpx.AsyncClient) -> None:
    ada, _, other = await batch(
        client, {"task": "greet", "payload": {"name": "Ada"}}, {"task": "greet", "payload": {"name": "Alan"}},
        {"task": "other", "payload": {"name": "Ada"}, "queue": "q2"},
    )  # fmt: skip
    unknown = await client.get("/api/v1/jobs", params={"q": "Ada"})
    assert unknown.status_code == 400
    assert unknown.headers["content-type"].startswith("application/problem+json") and unknown.json()["field"] == "q"
    found = (await client.get("/api/v1/jobs", params={"payload": "Ada"})).json()["items"]
    assert [j["id"] for j in found] == [other["id"], ada["id"]]
    found = (await client.get("/api/v1/jobs", params={"payload": "Ada", "task": "greet"})).json()["items"]
    assert [j["id"] for j in found] == [ada["id"]]
    found = (await client.get("/api/v1/jobs", params={"id": str(ada["id"])[:23]})).json()["items"]
    assert [j["id"] for j in found] == [ada["id"]]
    future = datetime(2100, 1, 1, tzinfo=UTC).isoformat()
    assert (await client.get("/api/v1/jobs", params={"created_after": future})).json()["items"] == []
    assert len((await client.get("/api/v1/jobs", params={"created_before": future})).json()["items"]) == 3
    naive = await client.get("/api/v1/jobs", params={"created_after": "2024-01-01T00:00:00"})
    assert naive.status_code == 422 and naive.json()["field"] == "created_after"
    # A number is no time here (pydantic would read it as seconds since 1970; the schema says date-time).
    for number in ("2026", "1700000000.5", "-1"):
        refused = await client.get("/api/v1/jobs", params={"created_before": number})
        assert refused.status_code == 422 and refused.json()["field"] == "created_before", number


async def test_bulk_actions_by_filter_and_by_ids_report_what_changed(client: httpx.AsyncClient) -> None:
    jobs = await batch(client, *[{"task": "mail", "payload": {"n": i}} for i in range(120)], {"task": "keep"})
    body = {"action": "cancel", "filter": {"state": ["queued"], "task": "mail"}, "reason": "mailing stopped"}
    answer = await client.post("/api/v1/jobs/actions", json=body)
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert (report["action"], report["matched"], report["changed"], report["refused_count"]) == ("cancel", 120, 120, 0)
    listed = (await client.get("/api/v1/jobs", params={"state": "cancelled", "limit": 500})).json()["items"]
    assert len(listed) == 120 and {j["reason"] for j in listed} == {"mailing stopped"}
    kept = (await client.get("/api/v1/jobs", params={"task": "keep"})).json()["items"]
    assert [j["state"] for j in kept] == [JobState.QUEUED.value]
    # by ids: cancelled ones retry; the queued one and an unknown id are refused, each with why
    ids = [str(jobs[0]["id"]), str(jobs[1]["id"]), str(jobs[-1]["id"]), "no-such-job"]
    report = (await client.post("/api/v1/jobs/actions", json={"action": "retry", "ids": ids})).json()
    assert report["changed"] == 2 and set(report["changed_ids"]) == set(ids[:2])
    assert report["refused_count"] == 2
    assert {r["id"]: r["reason"] for r in report["refused"]}["no-such-job"] == "not found"
    # a bounded filter says there is more
    body = {"action": "cancel", "filter": {"task": "mail", "state": ["queued"]}, "limit": 1}
    report = (await client.post("/api/v1/jobs/actions", json=body)).json()
    assert report["changed"] == 1 and report["more"] is True
    for bad, field in (
        ({"action": "explode", "ids": ["x"]}, "action"),
        ({"action": "cancel"}, "ids"),
        ({"action": "cancel", "ids": ["x"], "filter": {}}, "ids"),
        ({"action": "cancel", "filter": {"colour": "red"}}, "filter.colour"),
    ):
        answer = await client.post("/api/v1/jobs/actions", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["field"] == field, answer.json()
