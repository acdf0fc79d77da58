"""OpenTelemetry tracing end to end: an HTTP enqueue carrying a ``traceparent``, the job's run on a worker and
the spans the task makes are one trace, each span the child of the one before, recorded by the SDK's
in-memory exporter; the job stores its enqueue's traceparent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobengine import NonRetryable
from jobengine.core.models import TRACEPARENT
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from jobengine.tracing import TraceHeaders, TracingMiddleware

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
INCOMING = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def until(spans: Callable[[], list[ReadableSpan]], names: set[str]) -> dict[str, ReadableSpan]:
    """The finished spans by name once all of ``names`` ended (a run span ends after the job's outcome is
    stored, so after ``wait_for`` returns); a generous ceiling for a busy machine."""
    async with asyncio.timeout(30):
        while not names <= {s.name for s in spans()}:  # noqa: ASYNC110 - the exporter announces nothing
            await asyncio.sleep(0.02)
    first: dict[str, ReadableSpan] = {}
    for s in spans():  # in the order they ended: the traced request's POST before the other's
        first.setdefault(s.name, s)
    return first


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def parent_of(span: ReadableSpan) -> str:
    assert span.parent is not None
    return format(span.parent.span_id, "016x")


async def test_an_http_enqueue_and_the_jobs_run_are_one_trace(tmp_path: Path) -> None:
    provider, exporter = recorder()
    engine = Engine.from_settings(Settings(database=str(tmp_path / "t.db")), middleware=[TracingMiddleware(provider)])
    task_tracer = provider.get_tracer("app")

    @engine.task
    def resize(size: int) -> int:
        # A sync task, in a thread: the run span is still the current one there.
        with task_tracer.start_as_current_span("resize.work"):
            return size * 2

    @engine.task
    async def broken() -> None:
        raise NonRetryable("no such image")

    async with engine:
        key = (await engine.keys.create("default", ["admin"]))[1]
        app = create_app(engine)
        app.add_middleware(TraceHeaders, tracer_provider=provider)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
        ) as client:
            r = await client.post("/api/v1/jobs", json={"task": "resize", "payload": {"size": 3}},
                                  headers={"traceparent": INCOMING})  # fmt: skip
            assert r.status_code == 201, r.text
            failing = await client.post("/api/v1/jobs", json={"task": "broken"})
            assert failing.status_code == 201, failing.text
        worker = engine.worker(concurrency=2, poll_interval=0.05)
        run = asyncio.create_task(worker.run())
        try:
            done = await engine.wait_for(r.json()["id"], timeout=30, poll=0.05)
            dead = await engine.wait_for(failing.json()["id"], timeout=30, poll=0.05)
            spans = await until(exporter.get_finished_spans, {"POST", "enqueue resize", "run resize",
                                                              "resize.work", "run broken"})  # fmt: skip
        finally:
            worker.stop()
            await asyncio.wait_for(run, 30)
    assert done.state is JobState.SUCCEEDED and done.result == 6
    assert dead.state is JobState.DEAD

    server, enqueue, running, work = (spans[n] for n in ("POST", "enqueue resize", "run resize", "resize.work"))
    for span in (server, enqueue, running, work):
        assert span.context is not None and format(span.context.trace_id, "032x") == TRACE_ID, span.name
    assert parent_of(server) == CALLER_SPAN and server.kind is SpanKind.SERVER
    assert parent_of(enqueue) == hex_span(server) and enqueue.kind is SpanKind.PRODUCER
    assert parent_of(running) == hex_span(enqueue) and running.kind is SpanKind.CONSUMER
    assert parent_of(work) == hex_span(running)
    # The response names the request's span; the job stores its enqueue span.
    assert r.headers["traceparent"] == f"00-{TRACE_ID}-{hex_span(server)}-01"
    assert done.trace == f"00-{TRACE_ID}-{hex_span(enqueue)}-01"
    assert {
        "jobengine.job.id": done.id, "jobengine.task": "resize", "jobengine.queue": "default",
        "jobengine.attempt": 1, "jobengine.outcome": "succeeded", "messaging.system": "jobengine",
    }.items() <= dict(running.attributes or {}).items()  # fmt: skip
    assert running.status.status_code is StatusCode.UNSET

    # A request without a traceparent starts its own trace; a failed run says so.
    failed = spans["run broken"]
    assert failed.context is not None and format(failed.context.trace_id, "032x") != TRACE_ID
    assert failed.status.status_code is StatusCode.ERROR and "no such image" in (failed.status.description or "")
    assert [e.name for e in failed.events] == ["exception"]
    assert (failed.attributes or {})["jobengine.outcome"] == "dead"


async def test_the_tracing_setting_installs_the_middleware_and_the_header(tmp_path: Path) -> None:
    """With ``tracing`` on and no SDK installed in the process, the API still passes the caller's trace
    through: the job and the response carry the incoming trace id (a no-op span keeps its parent's context)."""
    settings = Settings(database=str(tmp_path / "t.db"), tracing=True)
    engine = Engine.from_settings(settings)
    assert [type(m).__name__ for m in engine.middleware] == ["TracingMiddleware"]
    async with engine:
        key = (await engine.keys.create("default", ["admin"]))[1]
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://api",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:  # fmt: skip
            r = await client.post("/api/v1/jobs", json={"task": "t"}, headers={"traceparent": INCOMING})
            assert r.status_code == 201, r.text
            assert r.headers["traceparent"] == INCOMING
            (job,) = await engine.get_jobs([r.json()["id"]])
            assert job.trace == INCOMING
            untraced = await client.post("/api/v1/jobs", json={"task": "t"})
            assert "traceparent" not in untraced.headers
            (job,) = await engine.get_jobs([untraced.json()["id"]])
            assert job.trace is None
    assert TRACEPARENT.fullmatch(INCOMING)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
