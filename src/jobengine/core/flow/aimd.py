"""The adaptive rate limiter: additive increase, multiplicative decrease (AIMD), on a controlled clock.

Outcomes are observed as they happen (``observe``); every ``interval`` seconds (``update(now)``) the
window is judged: if its error rate is above ``target_error_rate`` or its p95 latency above
``target_latency`` (0: no latency target) the rate is halved (``decrease``), otherwise it grows by
``increase``; always within ``floor`` and ``ceiling``. A window with no outcomes changes nothing (no
evidence either way), so an idle queue keeps its rate. Usage::

    aimd = Aimd(rate=10, floor=1, ceiling=100, increase=1, interval=5)
    aimd.observe(ok=True, latency=0.2, now=clock.now())
    rate = aimd.update(clock.now())
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobengine.core.flow.scale import percentile


@dataclass(slots=True)
class Aimd:
    rate: float
    floor: float
    ceiling: float
    increase: float = 1.0
    decrease: float = 0.5
    interval: float = 5.0
    target_error_rate: float = 0.05
    target_latency: float = 0.0
    started_at: float | None = None
    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    #: How many times the rate went up / down (for metrics and tests).
    raised: int = 0
    lowered: int = 0

    def __post_init__(self) -> None:
        if not (0 < self.floor <= self.ceiling):
            raise ValueError("floor must be above 0 and at most ceiling")
        if not (0 < self.decrease < 1) or self.increase <= 0 or self.interval <= 0:
            raise ValueError("decrease must be in (0, 1), increase and interval above 0")
        self.rate = min(self.ceiling, max(self.floor, self.rate))

    def observe(self, *, ok: bool, latency: float, now: float) -> None:
        if self.started_at is None:
            self.started_at = now
        if ok:
            self.ok += 1
        else:
            self.errors += 1
        if len(self.latencies) < 10_000:
            self.latencies.append(latency)

    def update(self, now: float) -> float:
        """Judge the window if ``interval`` has passed since it began; returns the rate (changed or not)."""
        if self.started_at is None:
            self.started_at = now
            return self.rate
        if now - self.started_at < self.interval:
            return self.rate
        total = self.ok + self.errors
        if total:
            error_rate = self.errors / total
            slow = self.target_latency > 0 and percentile(self.latencies, 0.95) > self.target_latency
            if error_rate > self.target_error_rate or slow:
                self.rate = max(self.floor, self.rate * self.decrease)
                self.lowered += 1
            else:
                self.rate = min(self.ceiling, self.rate + self.increase)
                self.raised += 1
        self.started_at, self.ok, self.errors, self.latencies = now, 0, 0, []
        return self.rate
