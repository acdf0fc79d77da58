"""A trace crosses processes through the job: an HTTP enqueue carrying a ``traceparent`` (served in the test's
process), then the job's run in a ``jobengine worker`` process, whose run span is the child of the enqueue
span that the job stored, and whose task's span is the child of that."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from acceptance.conftest import Procs
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from jobengine.tracing import TraceHeaders, TracingMiddleware
from support.waiting import wait_for

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
INCOMING = f"00-{TRACE_ID}-b7ad6b7169203331-01"


@pytest.mark.slow
async def test_the_run_span_on_a_worker_process_is_a_child_of_the_http_enqueue(procs: Procs, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    procs.env["SPANS"] = str(spans_file)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Engine.from_settings(Settings(database=procs.env["JOBENGINE_DATABASE"]),
                                  middleware=[TracingMiddleware(provider)])  # fmt: skip
    async with engine:
        key = (await engine.keys.create("default", ["admin"]))[1]
        app = create_app(engine)
        app.add_middleware(TraceHeaders, tracer_provider=provider)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                     headers={"Authorization": f"Bearer {key}"}) as client:  # fmt: skip
            r = await client.post("/api/v1/jobs", json={"task": "thumbnail", "payload": {"width": 640}},
                                  headers={"traceparent": INCOMING})  # fmt: skip
            assert r.status_code == 201, r.text
        worker = procs.worker(app="tests.support.tracing_app:app")
        done = await engine.wait_for(r.json()["id"], timeout=120, poll=0.1)
        assert done.state is JobState.SUCCEEDED and done.result == 320
    # The run span ends after the outcome is stored: wait for it in the worker's file.
    wait_for(lambda: spans_file.exists() and "run thumbnail" in spans_file.read_text(), 60, "the run span")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, procs.output(worker)

    here = {s.name: s for s in exporter.get_finished_spans()}
    enqueue = here["enqueue thumbnail"]
    assert enqueue.context is not None and format(enqueue.context.trace_id, "032x") == TRACE_ID
    enqueue_id = format(enqueue.context.span_id, "016x")
    assert done.trace == f"00-{TRACE_ID}-{enqueue_id}-01"
    there = {s["name"]: s for s in map(json.loads, spans_file.read_text().splitlines())}
    assert there["run thumbnail"]["trace"] == TRACE_ID
    assert there["run thumbnail"]["parent"] == enqueue_id
    assert there["thumbnail.render"]["trace"] == TRACE_ID
    assert there["thumbnail.render"]["parent"] == there["run thumbnail"]["span"]
