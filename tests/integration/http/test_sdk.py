"""The Python SDK: the HTTP client's retries (backoff, Retry-After, errors as problems) and a RemoteWorker
running the in-process Worker runtime against a real server over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobengine.core.graphs import GraphState
from jobengine.core.states import JobState
from jobengine.engine.canvas import Graph, TaskCall
from jobengine.errors import NonRetryable
from jobengine.http.server import ApiService
from jobengine.sdk import ApiClient, ApiError, RemoteWorker, TaskApp
from jobengine.tasks import phase
from jobengine.tracing import TracingMiddleware
from jobengine.worker import JobContext, SyncJobContext

from .conftest import Api, MakeApi


async def test_the_client_retries_with_backoff_and_honours_retry_after() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(503, headers={"Retry-After": "1"}, json={"status": 503, "detail": "busy"})
        if len(calls) == 3:
            return httpx.Response(429, json={"status": 429, "detail": "slow down"})
        return httpx.Response(200, json={"ok": True})

    async with ApiClient("http://api", "k", transport=httpx.MockTransport(handler), backoff_base=0.01) as api:
        assert await api.get("/x") == {"ok": True}
    assert len(calls) == 4 and api.retries == 3
    assert calls[2] - calls[1] >= 0.95  # Retry-After: 1 was honoured


async def test_enqueue_retries_with_one_idempotency_key(api: Api) -> None:
    """The first answer is lost (a 503 after the job was stored): the retry, with the same key, gets the job."""
    inner = httpx.ASGITransport(app=api.app)
    seen: list[str] = []

    class LosesFirstAnswer(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.headers["idempotency-key"])
            response = await inner.handle_async_request(request)
            if len(seen) == 1:
                await response.aread()
                return httpx.Response(503, json={"status": 503, "detail": "lost"})
            return response

    async with ApiClient("http://api", api.keys["acme"], transport=LosesFirstAnswer(), backoff_base=0.01) as c:
        job = await c.enqueue("send", {"to": "ada"}, priority=3)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert (job["task"], job["priority"]) == ("send", 3)
    assert sum((await api.engine.count_jobs()).values()) == 1


async def test_the_clients_enqueue_sends_every_option_it_takes(api: Api) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    transport = httpx.ASGITransport(app=api.app)
    async with ApiClient("http://api", api.keys["acme"], transport=transport) as c:
        parent = await c.enqueue("first")
        job = await c.enqueue(
            "send", {"to": "ada"}, queue="mail", priority=3, run_at=run_at, max_attempts=7,
            idempotency_key="once", depends_on=[parent["id"]], timeout=12.5,
        )  # fmt: skip
        later = await c.enqueue("send", delay=60.0)
        with pytest.raises(TypeError, match="prority"):
            await c.enqueue("send", prority=3)  # type: ignore[call-arg]
    assert (job["queue"], job["priority"], job["max_attempts"], job["depends_on"]) == ("mail", 3, 7, [parent["id"]])
    assert (job["timeout"], job["state"]) == (12.5, "blocked")
    stored = await api.engine.get_job(job["id"], "acme")
    assert abs(stored.run_at - run_at.timestamp()) < 0.01 and later["state"] == "scheduled"


async def test_the_client_raises_problems_and_gives_up_after_max_elapsed() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer k"
        return httpx.Response(422, json={"status": 422, "detail": "task: bad", "field": "task"})

    async with ApiClient("http://api", "k", transport=httpx.MockTransport(refuse)) as api:
        with pytest.raises(ApiError) as info:
            await api.post("/api/v1/jobs", {"task": "!"})
    assert info.value.status == 422 and info.value.problem["field"] == "task" and api.retries == 0

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with ApiClient("http://api", transport=httpx.MockTransport(down), max_elapsed=0.3, backoff_base=0.01) as api:
        started = time.monotonic()
        with pytest.raises(httpx.ConnectError):
            await api.get("/x")
        # Gave up near max_elapsed (0.3 s), far below the default's minute: the bound leaves room for load.
        assert time.monotonic() - started < 20 and api.retries >= 2


@asynccontextmanager
async def served(api: Api) -> AsyncIterator[str]:
    service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
    await service.start()
    try:
        yield service.url
    finally:
        await service.stop()


def remote_app(calls: dict[str, int]) -> TaskApp:
    app = TaskApp()

    @app.task()
    async def hello(ctx: Any) -> str:
        ctx.progress(0.5, "halfway")
        return f"hello {ctx.payload['name']}"

    @app.task(max_attempts=3)
    def flaky(ctx: Any) -> int:  # a sync task: runs in a thread
        calls["flaky"] = calls.get("flaky", 0) + 1
        if ctx.attempt < 2:
            raise RuntimeError("first attempt fails")
        return ctx.attempt

    @app.task()
    async def hopeless(ctx: Any) -> None:
        raise NonRetryable("cannot work")

    async def extract(ctx: Any) -> list[int]:
        await ctx.save_checkpoint({"at": 1})
        return [1, 2, 3]

    async def load(ctx: Any) -> int:
        return sum(ctx.results["extract"])

    app.add_task("etl", phases=[phase("extract", extract), phase("load", load)])
    return app


async def test_a_remote_worker_runs_tasks_with_phases_retries_and_dead_letters(
    make_api: MakeApi,
) -> None:
    async with make_api() as api, served(api) as url:
        key = await api.key("acme", "worker")
        calls: dict[str, int] = {}
        worker = RemoteWorker(url, key=key, tasks=remote_app(calls), concurrency=4, lease_seconds=5.0,
                              long_poll=1.0)  # fmt: skip
        run = asyncio.create_task(worker.run())
        engine = api.engine
        jobs = {
            "hello": await engine.enqueue("hello", {"name": "Ada"}, tenant="acme"),
            "flaky": await engine.enqueue("flaky", tenant="acme", max_attempts=3),
            "hopeless": await engine.enqueue("hopeless", tenant="acme"),
            "etl": await engine.enqueue("etl", tenant="acme"),
            "theirs": await engine.enqueue("hello", {"name": "Bob"}, tenant="globex"),
        }
        await engine.wait_for(jobs["hello"].id, 60)
        # flaky retries after its backoff (up to 1s): wait for it to finish.
        await engine.wait_for(jobs["flaky"].id, 60)
        await engine.wait_for(jobs["hopeless"].id, 60)
        await engine.wait_for(jobs["etl"].id, 60)
        worker.stop()
        await asyncio.wait_for(run, 60)
        hello = await engine.get_job(jobs["hello"].id)
        assert (hello.state, hello.result) == (JobState.SUCCEEDED, "hello Ada")
        flaky = await engine.get_job(jobs["flaky"].id)
        assert (flaky.state, flaky.result, flaky.attempt, calls["flaky"]) == (JobState.SUCCEEDED, 2, 2, 2)
        assert flaky.errors[0].message == "first attempt fails"
        hopeless = await engine.get_job(jobs["hopeless"].id)
        assert hopeless.state is JobState.DEAD and hopeless.errors[0].type == "NonRetryable"
        etl = await engine.get_job(jobs["etl"].id)
        assert etl.state is JobState.SUCCEEDED and etl.result == {"extract": [1, 2, 3], "load": 6}
        assert [(p.name, p.state.value) for p in etl.phases] == [("extract", "succeeded"), ("load", "succeeded")]
        assert etl.phases[0].checkpoint == {"at": 1}
        phase_events = [e for e in await engine.events(0, 1000, etl.id) if e.type == "job.phase"]
        assert [(e.data["phase_event"], e.data["phase"]) for e in phase_events] == [
            ("phase.started", "extract"), ("phase.succeeded", "extract"),
            ("phase.started", "load"), ("phase.succeeded", "load"),
        ]  # fmt: skip
        # Another tenant's job is not this worker's to run.
        assert (await engine.get_job(jobs["theirs"].id)).state is JobState.QUEUED


async def test_a_remote_worker_shuts_down_gracefully(make_api: MakeApi) -> None:
    async with make_api() as api, served(api) as url:
        key = await api.key("acme", "worker")
        app = TaskApp()
        started = asyncio.Event()

        @app.task()
        async def forever(ctx: Any) -> None:
            started.set()
            await asyncio.sleep(3600)

        worker = RemoteWorker(url, key=key, tasks=app, grace_period=0.2, long_poll=20.0)
        run = asyncio.create_task(worker.run())
        job = await api.engine.enqueue("forever", tenant="acme")
        await asyncio.wait_for(started.wait(), 60)
        t0 = time.monotonic()
        worker.stop()
        await asyncio.wait_for(run, 60)
        assert time.monotonic() - t0 < 15  # the 20 s long-poll did not hold the shutdown up
        released = await api.engine.get_job(job.id)
        assert released.state is JobState.QUEUED and released.attempt == 0  # given back, no attempt spent


async def test_a_remote_worker_runs_tasks_that_take_named_arguments(make_api: MakeApi) -> None:
    async with make_api() as api, served(api) as url:
        key = await api.key("acme", "worker")
        app = TaskApp()

        @app.task()
        async def greet(ctx: JobContext, name: str, punctuation: str = "!") -> str:
            return f"hello {name}{punctuation} (attempt {ctx.attempt})"

        def count(text: str) -> int:
            return len(text)

        def double(ctx: SyncJobContext) -> int:
            return 2 * int(ctx.results["count"])

        app.add_task("words", phases=[count, double])
        worker = RemoteWorker(url, key=key, tasks=app, long_poll=1.0)
        run = asyncio.create_task(worker.run())
        greeted = await api.engine.enqueue("greet", {"name": "Ada"}, tenant="acme")
        counted = await api.engine.enqueue("words", {"text": "abc"}, tenant="acme")
        greeted = await api.engine.wait_for(greeted.id, 60)
        counted = await api.engine.wait_for(counted.id, 60)
        worker.stop()
        await asyncio.wait_for(run, 60)
        assert greeted.result == "hello Ada! (attempt 1)"
        assert counted.result == {"count": 3, "double": 6}


async def test_a_remote_worker_sends_the_graph_nodes_a_task_adds(make_api: MakeApi) -> None:
    async with make_api() as api, served(api) as url:
        key = await api.key("acme", "worker")
        app = TaskApp()

        @app.task()
        async def split(ctx: JobContext) -> int:
            for i in range(3):
                ctx.graph.add(TaskCall("work", {"n": i}), name=f"work-{i}", before=["join"])
            return 3

        @app.task()
        async def work(ctx: JobContext) -> int:
            return int(ctx.payload["n"])

        @app.task()
        async def join(ctx: JobContext) -> str:
            return "joined"

        g = Graph("remote")
        g.add("split", TaskCall("split"))
        g.add("join", TaskCall("join"), after=["split"])
        handle = await api.engine.graphs.submit(g, tenant="acme")
        worker = RemoteWorker(url, key=key, tasks=app, concurrency=2, long_poll=1.0)
        run = asyncio.create_task(worker.run())
        try:
            status = await handle.wait(60)
        finally:
            worker.stop()
            await asyncio.wait_for(run, 60)
        assert (status.state, status.total, status.done) == (GraphState.SUCCEEDED, 5, 5)
        nodes = {n.name: n for n in (await handle.status(nodes=True)).nodes}
        assert nodes["join"].parents == ("split", "work-0", "work-1", "work-2")
        assert [nodes[f"work-{i}"].job.result for i in range(3)] == [0, 1, 2]


async def test_a_remote_workers_run_and_phase_spans_join_the_trace_the_claimed_job_carries(
    make_api: MakeApi,
) -> None:
    """The server (tracing on, no tracer provider: the caller's trace passes through) stores the request's
    traceparent with the job; the API's job JSON carries it to the remote worker, whose tracing middleware
    starts the run span under it and a span per phase under that."""
    incoming = "00-6bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with make_api(tracing=True) as api, served(api) as url:
        async with api.client() as client:
            r = await client.post("/api/v1/jobs", json={"task": "etl"}, headers={"traceparent": incoming})
            assert r.status_code == 201, r.text
            assert r.json()["trace"] == incoming
        worker = RemoteWorker(url, key=await api.key("acme", "worker"), tasks=remote_app({}), long_poll=1.0,
                              middleware=[TracingMiddleware(provider)])  # fmt: skip
        run = asyncio.create_task(worker.run())
        try:
            done = await api.engine.wait_for(r.json()["id"], 60)
            async with asyncio.timeout(30):  # the run span ends after the outcome is reported
                while "run etl" not in {s.name for s in exporter.get_finished_spans()}:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(run, 60)
    assert done.state is JobState.SUCCEEDED
    spans = {s.name: s for s in exporter.get_finished_spans()}
    running = spans["run etl"]
    assert running.context is not None and running.parent is not None
    assert format(running.context.trace_id, "032x") == incoming[3:35]
    assert format(running.parent.span_id, "016x") == incoming[36:52]
    for name in ("phase extract", "phase load"):
        assert spans[name].parent is not None and spans[name].parent.span_id == running.context.span_id, name
