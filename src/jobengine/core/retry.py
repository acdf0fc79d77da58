"""Retry policy: exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff And
Jitter"): the delay before attempt n+1 is uniform in [0, min(cap, base * 2**(n-1))]."""

from __future__ import annotations

import random
from dataclasses import dataclass

from jobengine.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base: float = 1.0
    cap: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0:
            raise ConfigError("retry: base and cap must be >= 0 seconds")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        if not self.jitter:
            return ceiling
        return (rng or random).uniform(0.0, ceiling)
