"""Prometheus metrics of the queue transports, in a registry of their own (never the process-global one).

Labels ``transport`` (database, redis, nats) and ``queue`` (the logical queue: planner, runner):

- ``jobengine_queue_depth`` (gauge): messages not settled, read from each transport on :meth:`refresh`;
- ``jobengine_queue_enqueued_total``: messages published (publishes swallowed as duplicates left out);
- ``jobengine_queue_deduplicated_total``: publishes swallowed by the idempotency window;
- ``jobengine_queue_acked_total``: deliveries acknowledged;
- ``jobengine_queue_retried_total``: deliveries sent back to be delivered again;
- ``jobengine_queue_dead_lettered_total``: messages put in the dead-letter stream;
- ``jobengine_queue_dropped_total``: exhausted messages dropped (dead-lettering off);
- ``jobengine_queue_lease_expired_total``: deliveries taken over after their lease expired;
- ``jobengine_queue_orphans_taken_total``: deliveries taken over from a consumer whose process is gone;
- ``jobengine_queue_history_changed_total``: times the broker was found to be another server, or the same one
  restarted (a failover, a restart), since it was last looked at.

Counters count what this process did. Usage (the
HTTP API serves it at ``/metrics`` beside its own registry)::

    await engine.transports.refresh_metrics()          # reads each transport's depth
    body = prometheus_client.generate_latest(engine.transports.metrics.registry)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from jobengine.ports.transport import Transport

COUNTED: Final = (
    "enqueued",
    "deduplicated",
    "acked",
    "retried",
    "dead_lettered",
    "dropped",
    "lease_expired",
    "orphans_taken",
    "history_changed",
)

_HELP: Final = {
    "enqueued": "Messages published to the queue transport (duplicates left out)",
    "deduplicated": "Publishes swallowed by the idempotency window",
    "acked": "Deliveries acknowledged",
    "retried": "Deliveries sent back to be delivered again",
    "dead_lettered": "Messages put in the dead-letter stream",
    "dropped": "Exhausted messages dropped because dead-lettering is off",
    "lease_expired": "Deliveries taken over after their lease expired",
    "orphans_taken": "Deliveries taken over from a consumer whose process is gone",
    "history_changed": "Times the broker was found failed over or restarted (recent messages may be lost)",
}


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        labels = ["transport", "queue"]
        self.depth = Gauge(
            "jobengine_queue_depth", "Messages not yet settled, by transport and logical queue", labels, registry=r
        )
        self._counters = {what: Counter(f"jobengine_queue_{what}", _HELP[what], labels, registry=r) for what in COUNTED}
        # Each labelled child, once looked up: transports count on every publish and receive, and prometheus's
        # lookup by label values costs more than the increment.
        self._children: dict[tuple[str, str, str], Counter] = {}

    def counters(self, transport: str, queue: str) -> _Labelled:
        """The ``Counters`` a transport of that name and logical queue counts into."""
        return _Labelled(self, transport, queue)

    def count(self, transport: str, queue: str, what: str, n: int = 1) -> None:
        if n <= 0:
            return
        child = self._children.get((transport, queue, what))
        if child is None:
            counter = self._counters.get(what)
            if counter is None:
                return
            child = self._children[(transport, queue, what)] = counter.labels(transport, queue)
        child.inc(n)

    def value(self, transport: str, queue: str, what: str) -> float:
        """A counter's current value in this process (for tests and ``jobengine health``)."""
        return float(self._counters[what].labels(transport, queue)._value.get())

    async def refresh(self, transports: Sequence[Transport]) -> None:
        """Set the depth gauge from each transport (one round trip each); a failing one keeps its last value."""
        for t in transports:
            try:
                self.depth.labels(t.capabilities.name, t.queue).set(await t.depth())
            except Exception:  # a metrics scrape must not fail because a broker is away
                continue


class _Labelled:
    __slots__ = ("_metrics", "_queue", "_transport")

    def __init__(self, metrics: QueueMetrics, transport: str, queue: str) -> None:
        self._metrics, self._transport, self._queue = metrics, transport, queue

    def count(self, what: str, n: int = 1) -> None:
        self._metrics.count(self._transport, self._queue, what, n)
