"""OpenTelemetry tracing: spans for each enqueue, job run, phase, graph and webhook delivery, joined into one
trace across processes.

Needs the ``otel`` extra (``opentelemetry-api``) and a tracer provider the application sets up (the SDK and an
exporter: without one every span is a no-op). Turn it on with the setting ``tracing: true``
(``JOBENGINE_TRACING=1``), or give the middleware yourself::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())          # plus a span processor and an exporter
    engine = Engine.from_settings(settings, middleware=[TracingMiddleware()])

How a trace crosses processes:

- ``enqueue <task>`` (kind PRODUCER) is a child of the current span (an HTTP request's, see
  :class:`TraceHeaders`); its W3C ``traceparent`` is stored with the job (:attr:`NewJob.trace`).
- ``run <task>`` (kind CONSUMER), one per attempt on whichever worker claims the job, is a child of that
  enqueue span, and is the current span while the task runs (a sync task's thread too), so the spans a task
  makes are its children. A failed attempt has status ERROR and the exception recorded.
- ``phase <name>`` (INTERNAL), one per named phase an attempt runs, is a child of the run span and current
  while the phase runs; a failed phase has status ERROR.
- ``graph <name>`` (PRODUCER) stands for submitting a graph; its nodes are enqueued under it (a job that comes
  with a ``trace`` is enqueued under that), and nodes a node adds under the adding node's enqueue span.
- ``webhook <event type>`` (CLIENT), one per delivery attempt, is a child of the event's job's stored
  traceparent, and the request carries its own ``traceparent`` to the receiver.
- The HTTP API (with the setting on) reads an incoming ``traceparent`` header, makes a SERVER span under it
  for the request, and answers with that span's ``traceparent``.

Failure policy: tracing never changes a job's outcome; its hooks are observers (``jobengine.middleware``).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextvars import Token
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jobengine.core.models import Job, NewJob
from jobengine.middleware import Middleware
from jobengine.version import __version__

__all__ = ["TraceHeaders", "TracingMiddleware"]

# Only W3C trace context is stored with a job and read from requests, whatever global propagator the
# application configured: the job's column holds exactly one traceparent.
_W3C = TraceContextTextMapPropagator()
_SYSTEM = "jobengine"


def _attributes(job: NewJob | Job, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "jobengine.job.id": job.id,
        "jobengine.task": job.task,
        "jobengine.queue": job.queue,
        "jobengine.tenant": job.tenant,
    }


def traceparent(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span``, or None for a span with no valid context (tracing off)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


class TracingMiddleware(Middleware):
    """Spans for each enqueue (PRODUCER) and each attempt a worker runs (CONSUMER), with the job's id, task,
    queue, tenant and attempt as attributes; the enqueue's ``traceparent`` travels with the job. Give it to
    the engine (or set ``tracing: true``). ``tracer_provider``: the global one when None. Usage::

        engine = Engine.from_settings(settings, middleware=[TracingMiddleware()])
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("jobengine", __version__, tracer_provider)
        # The open run span of each job running on this worker (one attempt at a time per job), and of its
        # running phase with the token that makes the run span current again when the phase ends.
        self._runs: dict[str, Span] = {}
        self._phases: dict[str, tuple[Span, Token[Context]]] = {}

    def before_enqueue(self, job: NewJob) -> NewJob:
        """The span of creating the job, ended at once; the job carries its traceparent. A job that comes
        with a traceparent already (a graph's node: its graph's, or the adding node's) is enqueued under it,
        else under the current span."""
        parent = _W3C.extract({"traceparent": job.trace}) if job.trace else None
        span = self._tracer.start_span(
            f"enqueue {job.task}", parent, SpanKind.PRODUCER, attributes=_attributes(job, "create")
        )
        span.end()
        stored = traceparent(span)
        return replace(job, trace=stored) if stored is not None else job

    def before_run(self, job: Job) -> None:
        """Start the attempt's span under the job's stored trace and make it current for the task."""
        parent = _W3C.extract({"traceparent": job.trace}) if job.trace else None
        attributes = _attributes(job, "process")
        attributes["jobengine.attempt"] = job.attempt
        span = self._tracer.start_span(f"run {job.task}", parent, SpanKind.CONSUMER, attributes)
        self._runs[job.id] = span
        # Never detached: the hook runs in the attempt's own context, which ends with the attempt.
        otel_context.attach(trace.set_span_in_context(span, parent))

    def before_phase(self, job: Job, phase: str, index: int) -> None:
        """Start the phase's span under the attempt's and make it current while the phase runs."""
        run = self._runs.get(job.id)
        if run is None:
            return
        attributes: dict[str, Any] = {"jobengine.job.id": job.id, "jobengine.phase": phase,
                                      "jobengine.phase.index": index}  # fmt: skip
        span = self._tracer.start_span(f"phase {phase}", trace.set_span_in_context(run), attributes=attributes)
        self._phases[job.id] = (span, otel_context.attach(trace.set_span_in_context(span)))

    def after_phase(self, job: Job, phase: str, index: int, error: BaseException | None) -> None:
        """End the phase's span (ERROR with the exception when the phase failed); the run span is current
        again."""
        opened = self._phases.pop(job.id, None)
        if opened is None:
            return
        span, token = opened
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        # Called in the context before_phase attached in (the attempt's own): detaching there is exact.
        otel_context.detach(token)

    def graph_trace(self, name: str, graph_id: str, tenant: str) -> str | None:
        """The span of creating a graph (ended at once) under the current span; its traceparent is what the
        graph's nodes are enqueued under, so the graph is one trace."""
        attributes = {"jobengine.graph.id": graph_id, "jobengine.graph.name": name, "jobengine.tenant": tenant}
        span = self._tracer.start_span(f"graph {name}", kind=SpanKind.PRODUCER, attributes=attributes)
        span.end()
        return traceparent(span)

    def delivery(self, event_type: str, parent: str | None, attributes: Mapping[str, str | int]) -> _Delivery:
        """The span of one attempt to deliver a webhook, begun under the job's stored traceparent; the
        request carries the span's traceparent so the receiver can go on with the trace."""
        context = _W3C.extract({"traceparent": parent}) if parent else None
        span = self._tracer.start_span(f"webhook {event_type}", context, SpanKind.CLIENT, dict(attributes))
        return _Delivery(span)

    def on_failure(self, job: Job, error: BaseException) -> None:
        """Mark the attempt's span failed, with the exception."""
        span = self._runs.get(job.id)
        if span is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        """End the attempt's span, with its outcome."""
        span = self._runs.pop(job.id, None)
        if span is not None:
            span.set_attribute("jobengine.outcome", outcome)
            span.end()


class _Delivery:
    """A begun webhook delivery span (:class:`jobengine.middleware.DeliveryTrace`)."""

    def __init__(self, span: Span) -> None:
        self._span = span
        outgoing = traceparent(span)
        self.headers: Mapping[str, str] = {"traceparent": outgoing} if outgoing is not None else {}

    def ended(self, status: int | None, error: str | None) -> None:
        if status is not None:
            self._span.set_attribute("http.response.status_code", status)
        if error is not None:
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()


class TraceHeaders:
    """ASGI middleware: a SERVER span for each HTTP request, a child of the request's ``traceparent`` header
    when it has a valid one, current while the request is handled (so an enqueue span is its child); the
    response carries the span's ``traceparent``. ``create_app`` installs it when ``tracing`` is on. Usage::

        app.add_middleware(TraceHeaders)
    """

    def __init__(self, app: Any, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.app = app
        self._tracer = trace.get_tracer("jobengine.http", __version__, tracer_provider)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k == b"traceparent"}
        parent = _W3C.extract(headers)
        method = scope["method"]
        attributes = {"http.request.method": method, "url.path": scope["path"]}
        # Named by the method alone: a path holds ids, and a span name must not grow with them.
        with self._tracer.start_as_current_span(method, parent, SpanKind.SERVER, attributes, end_on_exit=True) as span:
            outgoing = traceparent(span)

            async def send_with_header(message: Mapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if outgoing is not None:
                        message = {**message, "headers": [*message.get("headers", ()),
                                                          (b"traceparent", outgoing.encode("latin-1"))]}  # fmt: skip
                await send(message)

            await self.app(scope, receive, send_with_header)
