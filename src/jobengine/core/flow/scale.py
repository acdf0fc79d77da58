"""Scale signals: latency percentiles, throughput over a sliding window, and a recommended worker count.

``recommended_workers`` answers "how many workers drain this backlog within ``target`` seconds at the
rate one worker achieves now": ``ceil((depth + arrivals during target) / (per_worker * target))``, at
least 1 while anything is queued or running, 0 for an idle queue with no throughput to judge by.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(slots=True)
class Window:
    """Completed jobs of the last ``seconds``: (finished at, wait before start, run time, ok)."""

    seconds: float = 60.0
    samples: deque[tuple[float, float, float, bool]] = field(default_factory=deque)
    enqueued: deque[float] = field(default_factory=deque)

    def add(self, at: float, wait: float, run: float, ok: bool) -> None:
        self.samples.append((at, wait, run, ok))
        if len(self.samples) > 100_000:
            self.samples.popleft()

    def arrived(self, at: float, n: int = 1) -> None:
        self.enqueued.extend([at] * min(n, 10_000))
        while len(self.enqueued) > 100_000:
            self.enqueued.popleft()

    def trim(self, now: float) -> None:
        while self.samples and self.samples[0][0] < now - self.seconds:
            self.samples.popleft()
        while self.enqueued and self.enqueued[0] < now - self.seconds:
            self.enqueued.popleft()


@dataclass(frozen=True, slots=True)
class ScaleReport:
    queue: str
    depth: int
    running: int
    throughput: float  # jobs finished a second over the window
    arrival_rate: float  # jobs enqueued a second over the window (this process's enqueues)
    wait_p50: float
    wait_p95: float
    wait_p99: float
    run_p50: float
    run_p95: float
    run_p99: float
    workers_busy: float  # average running jobs over the window (run time / window)
    recommended_workers: int
    target_seconds: float


def report(queue: str, window: Window, now: float, *, depth: int, running: int, target: float) -> ScaleReport:
    window.trim(now)
    waits = [s[1] for s in window.samples]
    runs = [s[2] for s in window.samples]
    done = len(window.samples)
    throughput = done / window.seconds
    arrivals = len(window.enqueued) / window.seconds
    busy = sum(runs) / window.seconds
    return ScaleReport(
        queue, depth, running, throughput, arrivals,
        percentile(waits, 0.5), percentile(waits, 0.95), percentile(waits, 0.99),
        percentile(runs, 0.5), percentile(runs, 0.95), percentile(runs, 0.99),
        busy,
        recommended_workers(depth, running, runs, arrivals, target),
        target,
    )  # fmt: skip


def recommended_workers(depth: int, running: int, run_times: Sequence[float], arrivals: float, target: float) -> int:
    """Job slots needed to finish ``depth`` queued jobs plus what arrives meanwhile within ``target``
    seconds, each slot doing one job per mean run time (no run times yet: one slot per running job)."""
    if depth <= 0 and running <= 0 and arrivals <= 0:
        return 0
    if not run_times:
        return max(1, running)
    mean = max(sum(run_times) / len(run_times), 1e-3)
    per_slot = target / mean  # jobs one slot finishes within the target
    work = depth + running + arrivals * target
    return max(1, math.ceil(work / per_slot))
