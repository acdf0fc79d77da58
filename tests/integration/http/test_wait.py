"""``GET /api/v1/jobs/{id}?wait=``: a long poll that answers once the job ended, or at the end of the wait
with the job as it is; its bounds; the Python SDK's ``ApiClient.wait`` over it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from jobengine import JobContext
from jobengine.core.states import JobState
from jobengine.sdk import ApiClient, ApiError

from .conftest import Api


@pytest.fixture
async def gate(api: Api) -> AsyncIterator[asyncio.Event]:
    """A worker of the engine running task ``gated``, which ends only when the test sets the event."""
    release = asyncio.Event()

    @api.engine.task()
    async def gated(ctx: JobContext) -> str:
        await release.wait()
        return "released"

    worker = api.engine.worker()
    running = asyncio.create_task(worker.run())
    yield release
    release.set()
    worker.stop()
    await asyncio.wait_for(running, 30)


async def _running(api: Api, job_id: str) -> None:
    async def state() -> JobState:
        return (await api.engine.get_job(job_id)).state

    for _ in range(600):  # the worker claims it (a ceiling of 30 s)
        if await state() is JobState.RUNNING:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} never ran")


async def test_a_wait_answers_once_the_job_ends(api: Api, acme: httpx.AsyncClient, gate: asyncio.Event) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "gated"})).json()
    await _running(api, job["id"])
    answer = asyncio.create_task(acme.get(f"/api/v1/jobs/{job['id']}", params={"wait": 60}))
    await asyncio.sleep(0.3)
    assert not answer.done(), "a wait on a running job answered before the job ended"
    gate.set()
    r = await asyncio.wait_for(answer, 30)
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["result"]) == ("succeeded", "released")


async def test_a_wait_that_runs_out_answers_the_job_as_it_is(acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "nobody-runs-this"})).json()
    r = await acme.get(f"/api/v1/jobs/{job['id']}", params={"wait": 0.3})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "queued"


async def test_a_wait_on_an_ended_job_answers_at_once(acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "nobody-runs-this"})).json()
    await acme.post(f"/api/v1/jobs/{job['id']}/cancel", json={})
    r = await asyncio.wait_for(acme.get(f"/api/v1/jobs/{job['id']}", params={"wait": 60}), 30)
    assert r.json()["state"] == "cancelled"


async def test_a_stopping_server_ends_a_wait_with_the_job_as_it_is(api: Api, acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "nobody-runs-this"})).json()
    answer = asyncio.create_task(acme.get(f"/api/v1/jobs/{job['id']}", params={"wait": 60}))
    await asyncio.sleep(0.3)
    api.app.state.jobengine.closing = True  # what ApiService.stop sets
    r = await asyncio.wait_for(answer, 20)  # far below the 60 s asked for
    assert (r.status_code, r.json()["state"]) == (200, "queued")


@pytest.mark.parametrize("wait", ["61", "-1", "soon", "nan"])
async def test_a_wait_out_of_bounds_is_refused_naming_it(acme: httpx.AsyncClient, wait: str) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "nobody-runs-this"})).json()
    r = await acme.get(f"/api/v1/jobs/{job['id']}", params={"wait": wait})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "wait"


async def test_another_tenants_job_is_not_found_before_any_wait(
    acme: httpx.AsyncClient, globex: httpx.AsyncClient
) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "nobody-runs-this"})).json()
    r = await asyncio.wait_for(globex.get(f"/api/v1/jobs/{job['id']}", params={"wait": 60}), 30)
    assert r.status_code == 404


async def test_openapi_shows_the_wait_and_its_bounds(acme: httpx.AsyncClient) -> None:
    spec = (await acme.get("/openapi.json")).json()
    params = {p["name"]: p for p in spec["paths"]["/api/v1/jobs/{job_id}"]["get"]["parameters"]}
    schema = params["wait"]["schema"]
    options = schema.get("anyOf", [schema])
    assert any(o.get("maximum") == 60 and o.get("minimum") == 0 for o in options), schema
    assert "state" in params["wait"]["description"]


async def test_the_sdk_waits_for_the_outcome(api: Api, gate: asyncio.Event) -> None:
    transport = httpx.ASGITransport(app=api.app)
    async with ApiClient("http://api", api.keys["acme"], transport=transport) as client:
        job = await client.enqueue("gated")
        waiting = asyncio.create_task(client.wait(job["id"], timeout=60))
        await _running(api, job["id"])
        gate.set()
        done = await asyncio.wait_for(waiting, 30)
        assert (done["state"], done["result"]) == ("succeeded", "released")

        other = await client.enqueue("nobody-runs-this")
        with pytest.raises(TimeoutError, match="still queued"):
            await client.wait(other["id"], timeout=0.3)
        with pytest.raises(ApiError) as unknown:
            await client.wait("no-such-job", timeout=1)
        assert unknown.value.status == 404


async def test_wait_for_sync_waits_from_code_that_is_not_async(api: Api, gate: asyncio.Event) -> None:
    job = await api.engine.enqueue("gated")
    waiting = asyncio.get_running_loop().run_in_executor(None, api.engine.wait_for_sync, job.id, 60.0)
    await _running(api, job.id)
    gate.set()
    done = await asyncio.wait_for(waiting, 30)
    assert (done.state, done.result) == (JobState.SUCCEEDED, "released")
