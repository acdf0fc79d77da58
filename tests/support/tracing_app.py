"""An app whose process records its spans, for the tests that a run span on a worker process (and the spans
of its phases) join the trace of the HTTP request that enqueued the job: each finished span is appended to
the file ``$SPANS`` as a JSON line of name, trace id, span id, parent span id, status and attributes.
Settings come from ``JOBENGINE_*``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.tasks import phase
from jobengine.tracing import TracingMiddleware
from jobengine.worker.context import JobContext


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(os.environ["SPANS"], "a") as f:
            for s in spans:
                assert s.context is not None
                parent = format(s.parent.span_id, "016x") if s.parent is not None else None
                f.write(json.dumps({
                    "name": s.name, "trace": format(s.context.trace_id, "032x"),
                    "span": format(s.context.span_id, "016x"), "parent": parent,
                    "status": s.status.status_code.name, "attributes": dict(s.attributes or {}),
                }) + "\n")  # fmt: skip
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
app = Engine.from_settings(Settings.load(), middleware=[TracingMiddleware(provider)])


@app.task
async def thumbnail(width: int) -> int:
    with provider.get_tracer("app").start_as_current_span("thumbnail.render"):
        return width // 2


async def probe(ctx: JobContext) -> int:
    return 25


def encode(ctx: JobContext) -> str:  # a sync phase, in the worker's threads
    return f"{ctx.results['probe']} fps"


app.add_task("transcode", phases=[phase("probe", probe), phase("encode", encode)])
