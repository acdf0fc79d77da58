"""``GET /api/v1/workers``, a job's ``waiting_for``, and ``refuse_unknown_tasks``."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from jobengine.worker import JobContext

from .conftest import Api, MakeApi


async def _worker_running(api: Api, *tasks: str) -> tuple[object, asyncio.Task[None]]:
    for name in tasks:

        async def run(ctx: JobContext) -> None:
            await asyncio.sleep(3600)

        api.engine.add_task(name, run)
    worker = api.engine.worker(concurrency=2, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(10):
        while not await api.engine.fleet.live():  # noqa: ASYNC110 - the registry announces nothing
            await asyncio.sleep(0.02)
    return worker, task


async def test_live_workers_are_listed_with_what_they_run(api: Api, acme: httpx.AsyncClient) -> None:
    worker, task = await _worker_running(api, "resize", "email")
    try:
        (listed,) = (await acme.get("/api/v1/workers")).json()["items"]
        assert listed["id"] == worker.id and listed["kind"] == "local"  # type: ignore[attr-defined]
        assert listed["tasks"] == ["email", "resize"] and listed["queues"] == ["default"]
        assert listed["in_flight"] == 0 and listed["concurrency"] == 2  # admin: may see counts
        reader = await api.key("acme", "jobs:read")
        async with api.client(reader) as c:
            assert (await c.get("/api/v1/workers")).json()["items"][0]["in_flight"] is None
    finally:
        worker.stop()  # type: ignore[attr-defined]
        await task
    assert (await acme.get("/api/v1/workers")).json()["items"] == []


async def test_a_job_no_worker_can_run_says_so(api: Api, acme: httpx.AsyncClient) -> None:
    worker, task = await _worker_running(api, "resize")
    try:
        created = (await acme.post("/api/v1/jobs", json={"task": "report"})).json()
        assert created["waiting_for"] == "no worker runs task 'report'"
        assert (await acme.get(f"/api/v1/jobs/{created['id']}")).json()["waiting_for"] == "no worker runs task 'report'"
        (item,) = (await acme.get("/api/v1/jobs", params={"task": "report"})).json()["items"]
        assert item["waiting_for"] == "no worker runs task 'report'" and item["state"] == "queued"
        other = (await acme.post("/api/v1/jobs", json={"task": "resize", "queue": "media"})).json()
        assert other["waiting_for"] == "no worker serves queue 'media'"
    finally:
        worker.stop()  # type: ignore[attr-defined]
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_unknown_tasks_are_refused_when_the_catalogue_is_known(make_api: MakeApi) -> None:
    async with make_api(refuse_unknown_tasks=True) as api, api.client() as acme:
        refused = await acme.post("/api/v1/jobs", json={"task": "nope"})
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "nope" in problem["detail"] and "task" in str(problem)
        assert (await acme.get("/api/v1/jobs")).json()["items"] == []  # nothing stored
        worker, task = await _worker_running(api, "resize")
        try:
            assert (await acme.post("/api/v1/jobs", json={"task": "resize"})).status_code == 201
        finally:
            worker.stop()  # type: ignore[attr-defined]
            await task
