"""Prometheus metrics of one app, in a registry of its own (never the process-global default one).

Counters and histograms follow the event bus (throughput, outcomes, job durations, expired leases,
scheduler events, graph outcomes and durations) and the requests this app serves; gauges that describe the
store (jobs by queue and state, leases held, dead-letters, graphs by state) are read from the engine when
``/metrics`` is scraped. ``/metrics`` also
serves the queue transports' own registry (``jobengine.delivery.metrics``: depth and counters per
transport). :class:`MetricsServer` serves a registry on a port of its own, without a key: a worker's
(``jobengine worker --metrics-port``, :class:`jobengine.worker.metrics.WorkerMetrics`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobengine.core import events as ev
from jobengine.core.graphs import GRAPH_CANCELLED, GRAPH_COMPLETED, GRAPH_FAILED, GraphState
from jobengine.core.models import Event
from jobengine.core.states import JobState
from jobengine.errors import ConfigError
from jobengine.worker.metrics import DURATION_BUCKETS

_OUTCOMES = {ev.SUCCEEDED: "succeeded", ev.FAILED: "failed", ev.DEAD: "dead", ev.CANCELLED: "cancelled"}
_GRAPH_OUTCOMES = {GRAPH_COMPLETED: "succeeded", GRAPH_FAILED: "failed", GRAPH_CANCELLED: "cancelled"}
#: A graph runs from seconds (a chain of quick jobs) to a day (a nightly pipeline).
GRAPH_DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.events = Counter("jobengine_events", "Events seen on the bus, by type", ["type"], registry=r)
        self.finished = Counter(
            "jobengine_job_outcomes", "Attempts that ended, by queue and outcome", ["queue", "outcome"], registry=r
        )
        self.duration = Histogram(
            "jobengine_job_duration_seconds", "Run time of succeeded attempts", ["queue"], registry=r,
            buckets=DURATION_BUCKETS,
        )  # fmt: skip
        self.expired = Counter("jobengine_leases_expired", "Leases that expired (worker died)", registry=r)
        self.scheduler = Counter(
            "jobengine_scheduler_events", "Events of schedules and runs, by type", ["type"], registry=r
        )
        # Not "jobengine_queue_depth": the queue transports' registry has that name (messages per transport).
        self.depth = Gauge("jobengine_jobs", "Jobs by queue and state (all tenants)", ["queue", "state"], registry=r)
        self.leases = Gauge("jobengine_leases_active", "Running jobs (each holds a lease)", registry=r)
        self.dead = Gauge("jobengine_dead_letters", "Jobs in the dead-letter (state dead)", registry=r)
        self.paused = Gauge("jobengine_queue_paused", "1 if the queue is paused", ["queue"], registry=r)
        self.requests = Counter(
            "jobengine_http_requests", "HTTP requests, by method, route and status", ["method", "route", "status"],
            registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "jobengine_http_request_duration_seconds", "HTTP request latency", ["method", "route"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )  # fmt: skip
        self.sse_clients = Gauge("jobengine_sse_clients", "Open SSE streams", registry=r)
        self.sse_dropped = Counter("jobengine_sse_dropped", "SSE clients dropped for not reading", registry=r)
        self.graphs = Gauge("jobengine_graphs", "Graphs by state (all tenants)", ["state"], registry=r)
        self.graph_outcomes = Counter(
            "jobengine_graph_outcomes", "Graphs that ended, by outcome (succeeded, failed, cancelled)", ["outcome"],
            registry=r,
        )  # fmt: skip
        self.graph_duration = Histogram(
            "jobengine_graph_duration_seconds", "Seconds from a graph's submission to its outcome", ["outcome"],
            registry=r, buckets=GRAPH_DURATION_BUCKETS,
        )  # fmt: skip
        self.idempotent_replays = Counter(
            "jobengine_idempotent_replays", "POSTs answered from an Idempotency-Key record", registry=r
        )

    def on_event(self, event: Event) -> None:
        """A bus listener: quick, never raises."""
        self.events.labels(event.type).inc()
        if event.type.startswith(("run.", "schedule.", "signature.")):
            self.scheduler.labels(event.type).inc()
        if event.type in _GRAPH_OUTCOMES:
            self._graph_ended(event)
            return
        outcome = _OUTCOMES.get(event.type)
        if outcome is None:
            return
        queue = event.queue or ""
        self.finished.labels(queue, outcome).inc()
        data = event.data
        if event.type == ev.SUCCEEDED and isinstance(data.get("duration"), int | float):
            self.duration.labels(queue).observe(max(0.0, float(data["duration"])))
        if data.get("error_type") == "LeaseExpired":
            self.expired.inc()

    def _graph_ended(self, event: Event) -> None:
        outcome = _GRAPH_OUTCOMES[event.type]
        self.graph_outcomes.labels(outcome).inc()
        duration = event.data.get("duration")
        if isinstance(duration, int | float):
            self.graph_duration.labels(outcome).observe(max(0.0, float(duration)))

    def set_graph_gauges(self, counts: Mapping[GraphState, int]) -> None:
        for state in GraphState:
            self.graphs.labels(state.value).set(counts.get(state, 0))

    def set_store_gauges(self, counts: Mapping[tuple[str, JobState], int], paused: Mapping[str, bool]) -> None:
        self.depth.clear()
        for (queue, state), n in counts.items():
            self.depth.labels(queue, state.value).set(n)
        self.leases.set(sum(n for (_, s), n in counts.items() if s is JobState.RUNNING))
        self.dead.set(sum(n for (_, s), n in counts.items() if s is JobState.DEAD))
        self.paused.clear()
        for queue, is_paused in paused.items():
            self.paused.labels(queue).set(1 if is_paused else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request by its route template (not its raw path, which
    would make one series per job id)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, template, str(status)).inc()
            if not template.endswith("/stream"):  # a stream's duration is the client's session, not latency
                self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)


class MetricsServer:
    """A Service that serves ``registry`` at ``http://host:port/metrics`` (any path answers) with no key, in
    prometheus_client's own threaded server: a scrape never waits for the event loop. ``port`` 0 takes a
    free port (see :attr:`port` once started). Usage::

        server = MetricsServer(WorkerMetrics().registry, "0.0.0.0", 9187)
        await server.start()      # ConfigError naming `setting` if the port is taken
        ...
        await server.stop()
    """

    name = "metrics"

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *, setting: str = "metrics_port") -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.setting = setting
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        if self._server is not None:
            return
        try:
            self._server, self._thread = start_http_server(self.port, self.host, self.registry)
        except OSError as exc:
            reason = exc.strerror or exc
            raise ConfigError(f"{self.setting}: cannot listen on {self.host}:{self.port}: {reason}") from None
        self.port = int(self._server.server_address[1])

    async def stop(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        # shutdown() returns once serve_forever has (it polls every half second): off the event loop.
        await asyncio.to_thread(server.shutdown)
        server.server_close()
        if thread is not None:
            await asyncio.to_thread(thread.join, 5)
