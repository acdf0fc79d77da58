"""One trace from an HTTP enqueue to a webhook delivery: ``POST /api/v1/jobs`` with a ``traceparent``
(served in the test's process), the job's run in a ``jobengine worker`` process with its two phases as
child spans (the worker appends its spans to a file), then the delivery of the job's ``job.succeeded``
event to a real HTTP receiver by a dispatcher in the test's process, whose request carries the delivery
span's ``traceparent``. Every span is in the caller's trace, each the child of the one before."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from acceptance.conftest import Procs
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from jobengine.tracing import TraceHeaders, TracingMiddleware
from jobengine.webhooks.dispatcher import WebhookDispatcher
from support.waiting import until, wait_for
from support.webhook_receiver import Receiver

TRACE_ID = "1af7651916cd43dd8448eb211c80319c"
CALLER = "a7ad6b7169203331"
INCOMING = f"00-{TRACE_ID}-{CALLER}-01"


@pytest.mark.slow
async def test_one_trace_from_an_http_enqueue_through_a_phased_run_on_a_worker_to_the_webhook(
    procs: Procs, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    procs.env["SPANS"] = str(spans_file)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = replace(Settings(database=procs.env["JOBENGINE_DATABASE"]), webhook_allow_hosts=("127.0.0.1/32",),
                       webhook_poll_interval=0.1)  # fmt: skip
    engine = Engine.from_settings(settings, middleware=[TracingMiddleware(provider)])
    rx = Receiver()
    try:
        async with engine:
            key = (await engine.keys.create("default", ["admin"]))[1]
            await engine.webhooks.create_endpoint("default", rx.url, filter={"types": ["job.succeeded"]})
            app = create_app(engine)
            app.add_middleware(TraceHeaders, tracer_provider=provider)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                         headers={"Authorization": f"Bearer {key}"}) as client:  # fmt: skip
                r = await client.post("/api/v1/jobs", json={"task": "transcode"}, headers={"traceparent": INCOMING})
                assert r.status_code == 201, r.text
            dispatcher = WebhookDispatcher(engine)
            await dispatcher.start()
            try:
                worker = procs.worker(app="tests.support.tracing_app:app")
                done = await engine.wait_for(r.json()["id"], timeout=120, poll=0.1)
                assert done.state is JobState.SUCCEEDED, done
                assert done.result == {"probe": 25, "encode": "25 fps"}
                await until(lambda: bool(rx.requests), "the webhook delivery")
                await until(lambda: any(s.name == "webhook job.succeeded" for s in exporter.get_finished_spans()),
                            "the delivery span")  # fmt: skip
            finally:
                await dispatcher.stop()
        # The run span ends after the outcome is stored: wait for it in the worker's file.
        wait_for(lambda: spans_file.exists() and "run transcode" in spans_file.read_text(), 60, "the run span")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, procs.output(worker)
    finally:
        rx.close()

    here = {s.name: s for s in exporter.get_finished_spans()}
    there: dict[str, dict[str, Any]] = {s["name"]: s for s in map(json.loads, spans_file.read_text().splitlines())}

    def ids(name: str) -> tuple[str, str, str | None]:
        """(trace id, span id, parent span id) of a span made here or in the worker."""
        if name in there:
            return there[name]["trace"], there[name]["span"], there[name]["parent"]
        s = here[name]
        assert s.context is not None
        parent = format(s.parent.span_id, "016x") if s.parent is not None else None
        return format(s.context.trace_id, "032x"), format(s.context.span_id, "016x"), parent

    # The tree: caller -> POST -> enqueue -> run (worker) -> phase probe, phase encode (worker);
    # enqueue -> webhook delivery -> the receiver's request.
    tree = [
        ("POST", CALLER), ("enqueue transcode", "POST"), ("run transcode", "enqueue transcode"),
        ("phase probe", "run transcode"), ("phase encode", "run transcode"),
        ("webhook job.succeeded", "enqueue transcode"),
    ]  # fmt: skip
    for name, parent in tree:
        trace_id, _, parent_id = ids(name)
        assert trace_id == TRACE_ID, name
        assert parent_id == (parent if parent == CALLER else ids(parent)[1]), name
    assert done.trace is not None and done.trace.startswith(f"00-{TRACE_ID}-{ids('enqueue transcode')[1]}-")
    for name, index in (("phase probe", 0), ("phase encode", 1)):
        assert there[name]["status"] == "UNSET" and there[name]["attributes"]["jobengine.phase.index"] == index
        assert there[name]["attributes"]["jobengine.job.id"] == done.id
    delivery = here["webhook job.succeeded"]
    assert delivery.kind is SpanKind.CLIENT and (delivery.attributes or {})["http.response.status_code"] == 200
    (request,) = rx.requests
    assert json.loads(request.body)["data"]["job_id"] == done.id
    assert request.headers["traceparent"].startswith(f"00-{TRACE_ID}-{ids('webhook job.succeeded')[1]}-")
