"""The parts of a trace beyond an enqueue and a run, recorded by the SDK's in-memory exporter: each phase of
a phased task is a child span of its attempt's run span (a failed phase with status ERROR), a webhook
delivery about a job is a span in the job's trace whose request carries its ``traceparent`` to a real
receiver, and a graph's nodes, the ones a node adds too, are one trace under the graph's span. On SQLite and
PostgreSQL (the stored traceparent goes through each store's insert paths: graph nodes, added nodes)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import chain
from jobengine.secretbox import new_key
from jobengine.settings import Settings
from jobengine.tasks import phase
from jobengine.tracing import TracingMiddleware
from jobengine.worker.context import JobContext
from tests.integration.webhooks.conftest import FAST, dispatching
from tests.support.waiting import until
from tests.support.webhook_receiver import Receiver


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "t.db")


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def trace_of(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def parent_of(span: ReadableSpan) -> str | None:
    return format(span.parent.span_id, "016x") if span.parent is not None else None


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_phases_are_child_spans_of_the_run_and_the_webhook_delivery_joins_the_jobs_trace(database: str) -> None:
    provider, exporter = recorder()
    # A database that is not a local file keeps webhook secrets sealed: it needs a key.
    settings = replace(Settings(database=database, secret_keys=(new_key(),)), **FAST)  # type: ignore[arg-type]
    engine = Engine.from_settings(settings, middleware=[TracingMiddleware(provider)])
    app_tracer = provider.get_tracer("app")

    async def fetch(ctx: JobContext) -> int:
        with app_tracer.start_as_current_span("fetch.io"):  # the app's span: a child of the phase's
            return 2

    def convert(ctx: JobContext) -> int:  # a sync phase, in a thread
        return 3

    async def explode(ctx: JobContext) -> None:
        raise ValueError("bad frame")

    engine.add_task("video", phases=[phase("fetch", fetch), phase("convert", convert)])
    engine.add_task("broken", phases=[phase("fetch", fetch), phase("explode", explode)], max_attempts=1)
    rx = Receiver()
    try:
        async with engine:
            await engine.webhooks.create_endpoint("default", rx.url, filter={"types": ["job.succeeded"]})
            with app_tracer.start_as_current_span("caller"):
                job = await engine.enqueue("video", None)
            broken = await engine.enqueue("broken", None)
            worker = engine.worker(concurrency=2, poll_interval=0.05)
            run = asyncio.create_task(worker.run())
            try:
                async with dispatching(engine):
                    done = await engine.wait_for(job.id, timeout=30, poll=0.05)
                    dead = await engine.wait_for(broken.id, timeout=30, poll=0.05)
                    await until(lambda: bool(rx.requests), "the webhook delivery")
                    await until(lambda: bool(named(exporter, "webhook job.succeeded")), "the delivery span")
                    await until(lambda: len(named(exporter, "run broken")) == 1, "the failed run span")
            finally:
                worker.stop()
                await asyncio.wait_for(run, 30)
    finally:
        rx.close()
    assert done.state is JobState.SUCCEEDED and dead.state is JobState.DEAD
    assert done.trace is not None

    (caller,) = named(exporter, "caller")
    (enqueue,) = named(exporter, "enqueue video")
    (running,) = named(exporter, "run video")
    fetch_spans = {(s.attributes or {})["jobengine.job.id"]: s for s in named(exporter, "phase fetch")}
    (converting,) = named(exporter, "phase convert")
    (io,) = [s for s in named(exporter, "fetch.io") if s.parent and parent_of(s) == span_id(fetch_spans[job.id])]
    assert parent_of(enqueue) == span_id(caller) and parent_of(running) == span_id(enqueue)
    for child in (fetch_spans[job.id], converting):
        assert trace_of(child) == trace_of(caller) and parent_of(child) == span_id(running), child.name
        assert child.kind is SpanKind.INTERNAL and child.status.status_code is StatusCode.UNSET
    assert parent_of(io) == span_id(fetch_spans[job.id])
    assert (converting.attributes or {})["jobengine.phase.index"] == 1
    # The phases run one after the other inside the attempt.
    first, second = fetch_spans[job.id], converting
    assert first.end_time is not None and second.start_time is not None and running.start_time is not None
    assert running.start_time <= first.start_time <= first.end_time <= second.start_time  # type: ignore[operator]

    # A failed phase says so; the phases of another job are children of that job's run.
    (failed_run,) = named(exporter, "run broken")
    (exploded,) = named(exporter, "phase explode")
    assert parent_of(exploded) == span_id(failed_run) and parent_of(fetch_spans[broken.id]) == span_id(failed_run)
    assert exploded.status.status_code is StatusCode.ERROR and "bad frame" in (exploded.status.description or "")
    assert [e.name for e in exploded.events] == ["exception"]

    # The delivery: a CLIENT span under the job's stored traceparent, which its request carries on.
    (delivery,) = named(exporter, "webhook job.succeeded")
    assert trace_of(delivery) == trace_of(caller) and parent_of(delivery) == span_id(enqueue)
    assert done.trace.startswith(f"00-{trace_of(caller)}-{span_id(enqueue)}-")  # then the trace flags
    assert delivery.kind is SpanKind.CLIENT
    assert (delivery.attributes or {})["http.response.status_code"] == 200
    (request,) = rx.requests
    assert request.headers["traceparent"].startswith(f"00-{trace_of(caller)}-{span_id(delivery)}-")


async def test_a_graph_and_the_nodes_a_node_adds_are_one_trace(database: str) -> None:
    provider, exporter = recorder()
    engine = Engine.from_settings(Settings(database=database), middleware=[TracingMiddleware(provider)])

    @engine.task
    async def split(ctx: JobContext) -> int:
        ctx.graph.add(leaf.s(1), name="leaf-1")
        return 0

    @engine.task
    async def leaf(n: int) -> int:
        return n

    @engine.task
    async def total() -> int:
        return 1

    async with engine:
        handle = await engine.graphs.submit(chain(split.s(), total.s(), name="fan"))  # no span is current
        worker = engine.worker(concurrency=2, poll_interval=0.05)
        run = asyncio.create_task(worker.run())
        try:
            status = await handle.wait(timeout=30)
            runs = {"run split", "run total", "run leaf"}
            await until(lambda: runs <= {s.name for s in exporter.get_finished_spans()}, "the run spans")
        finally:
            worker.stop()
            await asyncio.wait_for(run, 30)
    assert status.state.value == "succeeded" and status.total == 3

    (graph,) = named(exporter, "graph fan")
    assert graph.parent is None and (graph.attributes or {})["jobengine.graph.id"] == handle.id
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for name in ("enqueue split", "enqueue total", "enqueue leaf", "run split", "run total", "run leaf"):
        assert trace_of(spans[name]) == trace_of(graph), name
    assert parent_of(spans["enqueue split"]) == span_id(graph)
    assert parent_of(spans["enqueue total"]) == span_id(graph)
    # The added node is enqueued under the adding node's enqueue span, and runs under its own.
    assert parent_of(spans["enqueue leaf"]) == span_id(spans["enqueue split"])
    assert parent_of(spans["run leaf"]) == span_id(spans["enqueue leaf"])
