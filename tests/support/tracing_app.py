"""An app whose process records its spans, for the test that a run span on a worker process joins the trace
of the HTTP request that enqueued the job: each finished span is appended to the file ``$SPANS`` as a JSON
line of name, trace id, span id and parent span id. Settings come from ``JOBENGINE_*`` (``tracing`` on)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.tracing import TracingMiddleware


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(os.environ["SPANS"], "a") as f:
            for s in spans:
                assert s.context is not None
                parent = format(s.parent.span_id, "016x") if s.parent is not None else None
                f.write(json.dumps({"name": s.name, "trace": format(s.context.trace_id, "032x"),
                                    "span": format(s.context.span_id, "016x"), "parent": parent}) + "\n")  # fmt: skip
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
app = Engine.from_settings(Settings.load(), middleware=[TracingMiddleware(provider)])


@app.task
async def thumbnail(width: int) -> int:
    with provider.get_tracer("app").start_as_current_span("thumbnail.render"):
        return width // 2
