"""Bad input at the HTTP edge: the inputs that were stored and then broke every read of the tenant (a time
past year 9999 once its offset is applied, a lone surrogate in a body, a phase started in year 9999)
answer 422 naming the field and store nothing, on SQLite and PostgreSQL; a row already stored out of the
bounds still reads; and a 500 leaves a keep-alive connection usable."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.errors import InvalidJob
from jobengine.http.server import ApiService
from tests.integration.http.conftest import Api, MakeApi, browser, form

W = "/api/v1/worker"
FAR = "9999-12-31T23:59:59-23:59"  # year 10000 in UTC
NEAR = "0001-01-01T00:00:00+23:59"  # year 0 in UTC
# Stored rows out of the bounds, as a row written before them (or by another program) holds.
YEAR_10000 = 253402387139.0
YEAR_0 = -62135683140.0

REFUSED_JOBS = [
    (json.dumps({"task": "t", "run_at": FAR}), "run_at"),
    (json.dumps({"task": "t", "run_at": NEAR}), "run_at"),
    ('{"task": "x", "payload": "\\ud800"}', "payload"),
    ('{"task": "x", "payload": {"\\ud800": 1}}', "payload.\\ud800"),
    ('{"task": "x", "payload": {"a": ["ok", "\\udc00"]}}', "payload.a.1"),
    ('{"task": "x", "payload": "a\\u0000b"}', "payload"),
    ('{"task": "x", "idempotency_key": "k\\udbff"}', "idempotency_key"),
    ('{"\\ud800": 1, "task": "x"}', "\\ud800"),
]


@pytest.fixture(params=["sqlite", "postgres"])
async def any_api(request: pytest.FixtureRequest, make_api: MakeApi) -> AsyncIterator[Api]:
    overrides = {"database": request.getfixturevalue("postgres_dsn")} if request.param == "postgres" else {}
    async with make_api(**overrides) as api:
        yield api


async def post_raw(client: httpx.AsyncClient, path: str, body: str) -> httpx.Response:
    return await client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})


def assert_refused(r: httpx.Response, field: str) -> None:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["field"] == field, r.text


async def test_inputs_that_broke_reads_are_refused_and_nothing_is_stored(any_api: Api) -> None:
    async with any_api.client() as acme:
        for body, field in REFUSED_JOBS:
            assert_refused(await post_raw(acme, "/api/v1/jobs", body), field)
        batch = json.dumps({"jobs": [{"task": "x", "run_at": FAR}]})
        assert_refused(await post_raw(acme, "/api/v1/jobs/batch", batch), "jobs.0.run_at")
        r = await post_raw(acme, "/api/v1/jobs/batch", '{"jobs": [{"task": "x"}, {"task": "x", "payload": "\\udfff"}]}')
        assert_refused(r, "jobs.1.payload")
        schedule = '{"name": "s", "every": 60, "template": {"task": "x", "payload": {"k": "\\ud800"}}}'
        assert_refused(await post_raw(acme, "/api/v1/schedules", schedule), "template.payload.k")
        items = '{"name": "s", "every": 60, "template": {"task": "x", "items": ["\\ud800"]}}'
        assert_refused(await post_raw(acme, "/api/v1/schedules", items), "template.items.0")
        assert (await acme.get("/api/v1/jobs")).json()["items"] == []
        assert (await acme.get("/api/v1/schedules")).json()["items"] == []


async def test_a_phase_time_out_of_bounds_is_refused_and_the_job_reads(any_api: Api) -> None:
    async with any_api.client() as acme:
        job = (await acme.post("/api/v1/jobs", json={"task": "p"})).json()
        claim = {"worker_id": "w", "queues": ["default"], "limit": 1}
        [entry] = (await acme.post(f"{W}/claim", json=claim)).json()["jobs"]
        token = entry["lease"]["token"]
        for when in (FAR, NEAR):
            phases = {"token": token, "phases": [{"name": "one", "state": "running", "started_at": when}]}
            assert_refused(await acme.post(f"{W}/jobs/{job['id']}/phases", json=phases), "phases.0.started_at")
            batch = {"updates": [{**phases, "job_id": job["id"]}]}
            assert_refused(await acme.post(f"{W}/phases", json=batch), "updates.0.phases.0.started_at")
        message = json.dumps({"token": token, "phases": [{"name": "one", "message": "\ud800"}]})
        assert_refused(await post_raw(acme, f"{W}/jobs/{job['id']}/phases", message), "phases.0.message")
        fail = json.dumps({"token": token, "error": {"type": "E\x00", "message": "m"}})
        assert_refused(await post_raw(acme, f"{W}/jobs/{job['id']}/fail", fail), "error.type")
        done = await acme.post(f"{W}/jobs/{job['id']}/complete", json={"token": token, "result": {"ok": 1}})
        assert done.status_code == 200
        got = (await acme.get(f"/api/v1/jobs/{job['id']}")).json()
        assert got["state"] == "succeeded" and got["phases"] == []
        assert (await acme.post(f"/api/v1/jobs/{job['id']}/cancel")).status_code == 409


async def test_a_row_stored_out_of_the_bounds_still_reads(any_api: Api) -> None:
    engine = any_api.engine
    late, early = NewJob("late", tenant="acme"), NewJob("early", tenant="acme")
    # As a row stored before the bounds: past the checks of the constructor, straight to the store.
    late.run_at, early.run_at = YEAR_10000, YEAR_0  # type: ignore[misc]
    await engine.enqueue_many([late, early])
    [claimed] = await engine.transitions.fetch_jobs(["default"], 1, WorkerId("w"), 30.0, tenant="acme")
    assert claimed.id == early.id
    phase = Phase("one", PhaseState.RUNNING, 0.5, started_at=YEAR_10000, finished_at=YEAR_0)
    assert claimed.lease_token is not None
    await engine.transitions.save_phases(
        [PhaseUpdate(claimed.id, LeaseToken(claimed.lease_token), (phase,), None, None)]
    )
    async with any_api.client() as acme:
        listed = await acme.get("/api/v1/jobs")
        assert listed.status_code == 200
        runs_at = {j["task"]: j["run_at"] for j in listed.json()["items"]}
        assert runs_at == {"late": "9998-12-31T23:59:59.999+00:00", "early": "1970-01-01T00:00:00.000+00:00"}
        one = await acme.get(f"/api/v1/jobs/{early.id}")
        assert one.status_code == 200
        assert one.json()["phases"][0]["started_at"] == "9998-12-31T23:59:59.999+00:00"
        for job_id in (late.id, early.id):
            assert (await acme.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
    async with browser(any_api, any_api.keys["acme"]) as ui:
        for job_id in (late.id, early.id):
            page = await ui.get(f"/jobs/{job_id}")
            assert page.status_code == 200 and "9998-12-31" in page.text
        assert (await ui.get("/jobs")).status_code == 200
    assert JobId(late.id)


def boom_app(api: Api) -> FastAPI:
    """The real app with one route that fails as a bug would: an exception no handler takes."""

    async def boom() -> None:
        raise RuntimeError("a bug")

    api.app.add_api_route("/api/v1/test-boom", boom, methods=["GET"])
    return api.app


async def test_a_keep_alive_connection_survives_a_500_and_refused_input(make_api: MakeApi) -> None:
    async with make_api() as api:
        service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=boom_app(api))
        await service.start()
        try:
            auth = {"Authorization": f"Bearer {api.keys['acme']}", "Content-Type": "application/json"}

            def two_by_two() -> list[tuple[int, str, str]]:
                conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
                answers = []
                try:
                    conn.connect()
                    sock = conn.sock
                    requests = [
                        ("GET", "/api/v1/test-boom", None),
                        ("GET", "/api/v1/jobs", None),
                        ("POST", "/api/v1/jobs", json.dumps({"task": "t", "run_at": FAR})),
                        ("POST", "/api/v1/jobs", '{"task": "x", "payload": "\\ud800"}'),
                        ("GET", "/api/v1/test-boom", None),
                        ("GET", "/api/v1/jobs", None),
                    ]
                    for method, path, body in requests:
                        conn.request(method, path, body=body, headers=auth)
                        r = conn.getresponse()
                        text = r.read().decode()
                        answers.append((r.status, r.getheader("content-type") or "", text))
                        assert conn.sock is sock, f"the connection was closed after {method} {path}: {r.status}"
                finally:
                    conn.close()
                return answers

            answers = await asyncio.to_thread(two_by_two)
        finally:
            await service.stop()
    assert [a[0] for a in answers] == [500, 200, 422, 422, 500, 200]
    boom = json.loads(answers[0][2])
    assert answers[0][1] == "application/problem+json" and boom["status"] == 500
    assert "a bug" not in answers[0][2]  # the detail says nothing about internals
    assert json.loads(answers[2][2])["field"] == "run_at" and json.loads(answers[3][2])["field"] == "payload"


async def test_a_cancel_reason_no_backend_can_store_is_refused(any_api: Api) -> None:
    job = await any_api.engine.enqueue("t", tenant="acme")
    async with browser(any_api, any_api.keys["acme"]) as ui:
        r = await ui.post(f"/jobs/{job.id}/cancel", data=form(ui, reason="stop\x00now"))
        assert r.status_code == 422 and "reason" in r.text
    async with any_api.client() as acme:
        r = await post_raw(acme, f"/api/v1/jobs/{job.id}/cancel", '{"reason": "\\udc80"}')
        assert_refused(r, "reason")
        assert (await acme.get(f"/api/v1/jobs/{job.id}")).json()["state"] == "queued"


async def test_a_simulation_after_a_time_out_of_the_bounds_is_refused(any_api: Api) -> None:
    async with any_api.client() as acme:
        spec = {"name": "s", "every": 60, "template": {"task": "x"}}
        assert (await acme.post("/api/v1/schedules", json=spec)).status_code == 201
        r = await acme.post("/api/v1/schedules/s/simulate", json={"after": FAR})
        assert_refused(r, "after")
    with pytest.raises(InvalidJob) as err:
        await any_api.engine.schedules.simulate("s", after=YEAR_10000, tenant="acme")
    assert err.value.field == "after"


async def test_reasons_and_trigger_data_no_backend_can_store_are_refused(any_api: Api) -> None:
    engine = any_api.engine
    async with any_api.client() as acme:
        spec = {"name": "s", "every": 3600, "template": {"task": "x"}}
        schedule = (await acme.post("/api/v1/schedules", json=spec)).json()
    async with browser(any_api, any_api.keys["acme"]) as ui:
        r = await ui.post(f"/schedules/{schedule['id']}/trigger", data=form(ui, reason="month\x00end"))
        assert r.status_code == 422 and "reason" in r.text
    for call, field in (
        (engine.schedules.trigger("s", reason="why \ud800", tenant="acme"), "reason"),
        (engine.schedules.trigger("s", reason="why", tenant="acme", data={"k": "\x00"}), "data"),
    ):
        with pytest.raises(InvalidJob) as err:
            await call
        assert err.value.field == field
    run = await engine.schedules.trigger("s", reason="fine", tenant="acme")
    with pytest.raises(InvalidJob) as err:
        await engine.runs.cancel(run.id, reason="\udc00", tenant="acme")
    assert err.value.field == "reason"
    async with any_api.client() as acme:
        runs = (await acme.get("/api/v1/runs")).json()["items"]
        assert [(r["id"], r["state"]) for r in runs] == [(run.id, run.state.value)]
