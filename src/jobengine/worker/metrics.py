"""What a worker reports as it runs jobs: the :class:`WorkerObserver` it calls, and :class:`WorkerMetrics`, the
observer that keeps Prometheus metrics of one worker in a registry of its own (never the process-global one).

``jobengine worker --metrics-port 9187`` serves them (no key: counts and durations by queue and task, no
payload); a program serves them as it likes::

    metrics = WorkerMetrics()
    worker = engine.worker(observer=metrics)
    body = prometheus_client.generate_latest(metrics.registry)

The observer is called in the worker's event loop and must be quick and never raise: a worker does not
guard its calls.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jobengine.core.models import Job
from jobengine.middleware import Middleware

#: Buckets of job run times, in seconds: from a few milliseconds to an hour.
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Buckets of a claim's round trip, in seconds.
CLAIM_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
#: The outcomes of an attempt that failed (the worker's names): retried later, dead-lettered, cancelled.
FAILED: Final = frozenset({"retry", "dead", "cancelled"})


class WorkerObserver(Middleware):
    """What a :class:`~jobengine.worker.runtime.Worker` tells as it goes (``WorkerOptions.observer``): its
    claims and heartbeats here, each attempt's start and end through the middleware hooks ``before_run`` and
    ``after_attempt`` (the observer runs right after the worker's own job log)."""

    def claimed(self, jobs: int, seconds: float) -> None:
        """A claim returned ``jobs`` jobs (maybe none) after ``seconds``."""

    def leases_extended(self, jobs: int) -> None:
        """A heartbeat extended the leases of ``jobs`` jobs."""


class WorkerMetrics(WorkerObserver):
    """A :class:`WorkerObserver` that counts into Prometheus metrics (``jobengine_worker_*``): jobs started,
    succeeded, failed (by outcome) and stopped (by reason), run times, jobs in flight, lease extensions,
    jobs claimed and the time a claim takes."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        by_task = ["queue", "task"]
        self.started_total = Counter("jobengine_worker_jobs_started", "Attempts begun", by_task, registry=r)
        self.succeeded_total = Counter(
            "jobengine_worker_jobs_succeeded", "Attempts that succeeded", by_task, registry=r
        )
        self.failed_total = Counter(
            "jobengine_worker_jobs_failed", "Attempts that failed, by outcome (retry, dead, cancelled)",
            [*by_task, "outcome"], registry=r,
        )  # fmt: skip
        self.stopped_total = Counter(
            "jobengine_worker_jobs_stopped", "Attempts stopped without an outcome (released, lease_lost)",
            [*by_task, "reason"], registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "jobengine_worker_job_duration_seconds", "Run time of attempts that succeeded or failed", by_task,
            registry=r, buckets=DURATION_BUCKETS,
        )  # fmt: skip
        self.in_flight = Gauge("jobengine_worker_jobs_in_flight", "Attempts running now", registry=r)
        self.lease_extensions = Counter(
            "jobengine_worker_lease_extensions", "Leases extended by heartbeats", registry=r
        )
        self.claimed_total = Counter("jobengine_worker_jobs_claimed", "Jobs claimed", registry=r)
        self.claim_seconds = Histogram(
            "jobengine_worker_claim_seconds", "Time a claim takes (a remote worker's includes its long poll)",
            registry=r, buckets=CLAIM_BUCKETS,
        )  # fmt: skip

    def claimed(self, jobs: int, seconds: float) -> None:
        self.claimed_total.inc(jobs)
        self.claim_seconds.observe(max(0.0, seconds))

    def before_run(self, job: Job) -> None:
        self.started_total.labels(job.queue, job.task).inc()
        self.in_flight.inc()

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        self.in_flight.dec()
        if outcome == "succeeded":
            self.succeeded_total.labels(job.queue, job.task).inc()
        elif outcome in FAILED:
            self.failed_total.labels(job.queue, job.task, outcome).inc()
        else:
            self.stopped_total.labels(job.queue, job.task, outcome).inc()
            return
        self.duration.labels(job.queue, job.task).observe(max(0.0, seconds))

    def leases_extended(self, jobs: int) -> None:
        self.lease_extensions.inc(jobs)
