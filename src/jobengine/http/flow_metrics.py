"""Flow-control metrics for ``/metrics``: scale signals per queue, adaptive rates, pressure, refusals and
the load-shedding state with its thresholds. Built fresh at every scrape from the engine's view (a
registry of its own, so nothing here outlives the request)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobengine.core.flow.pressure import Load, Pressure

if TYPE_CHECKING:
    from jobengine.engine import Engine

_PRESSURE = {Pressure.NONE: 0, Pressure.SOFT: 1, Pressure.HARD: 2}


class _Snapshot(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics


async def render_flow_metrics(engine: Engine) -> bytes:
    reports = await engine.flow.scale_all()
    limits = await engine.flow.limits()
    load = await engine.flow.load_state()
    snap = engine.flow.snapshot()
    g = GaugeMetricFamily
    depth = g("jobengine_flow_queue_depth", "Runnable jobs (queued, scheduled, failed), all tenants", labels=["queue"])
    running = g("jobengine_flow_running", "Running jobs, all tenants", labels=["queue"])
    tput = g("jobengine_flow_throughput", "Jobs finished a second over the last minute (seen here)", labels=["queue"])
    wait = g(
        "jobengine_flow_wait_seconds", "Wait before start, by quantile (last minute)", labels=["queue", "quantile"]
    )
    run = g("jobengine_flow_run_seconds", "Run time, by quantile (last minute)", labels=["queue", "quantile"])
    workers = g("jobengine_flow_recommended_workers", "Worker slots to drain the backlog in the target time",
                labels=["queue"])  # fmt: skip
    pressure = g("jobengine_flow_pressure", "Backpressure: 0 none, 1 soft, 2 hard", labels=["queue"])
    for r in reports:
        depth.add_metric([r.queue], r.depth)
        running.add_metric([r.queue], r.running)
        tput.add_metric([r.queue], r.throughput)
        for q, w, x in (
            ("0.5", r.wait_p50, r.run_p50),
            ("0.95", r.wait_p95, r.run_p95),
            ("0.99", r.wait_p99, r.run_p99),
        ):
            wait.add_metric([r.queue, q], w)
            run.add_metric([r.queue, q], x)
        workers.add_metric([r.queue], r.recommended_workers)
        pressure.add_metric([r.queue], _PRESSURE[await engine.queues.pressure(r.queue)])
    rate = g("jobengine_flow_rate_limit", "The token bucket's rate claims use now (jobs/s)", labels=["queue"])
    adaptive = g("jobengine_flow_adaptive_rate", "The adaptive (AIMD) limiter's current rate", labels=["queue"])
    for queue, lim in sorted(limits.items()):
        current = engine.flow.rate(lim)
        if current is not None:
            rate.add_metric([queue], current)
    for queue, value in sorted(snap["adaptive"].items()):
        adaptive.add_metric([queue], value)
    refused = CounterMetricFamily(
        "jobengine_flow_refused", "Enqueues refused (hard_limit, shed)", labels=["queue", "reason"]
    )
    for (queue, reason), n in sorted(snap["refused"].items()):
        refused.add_metric([queue, reason], n)
    soft = CounterMetricFamily(
        "jobengine_flow_soft_pressure", "Enqueues accepted past the soft limit", labels=["queue"]
    )
    for queue, n in sorted(snap["soft"].items()):
        soft.add_metric([queue], n)
    saturated = g("jobengine_load_saturated", "1 while low-priority work is shed", labels=["reason"])
    saturated.add_metric([",".join(load.reasons)], 1 if load.state is Load.SATURATED else 0)
    s = engine.settings
    thresholds = g("jobengine_load_threshold", "Load-shedding thresholds (0: not watched)", labels=["signal"])
    for name, value in (("depth", s.shed_depth), ("in_flight", s.shed_in_flight), ("latency", s.shed_latency),
                        ("min_priority", s.shed_min_priority)):  # fmt: skip
        thresholds.add_metric([name], value)
    registry = CollectorRegistry()
    registry.register(
        _Snapshot(
            [depth, running, tput, wait, run, workers, pressure, rate, adaptive, refused, soft, saturated, thresholds]
        )
    )
    return generate_latest(registry)
