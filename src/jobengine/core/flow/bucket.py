"""The token bucket: ``rate`` tokens a second, at most ``burst`` held; a job start takes one token.

A bucket is a value ``(tokens, at)``; refilling is a pure function of the time elapsed, so a store only
writes a bucket when tokens were taken (a claim that takes nothing writes nothing). A bucket nobody
used yet is full.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    at: float

    @classmethod
    def full(cls, burst: float, now: float) -> Bucket:
        return cls(float(burst), now)

    def refilled(self, rate: float, burst: float, now: float) -> Bucket:
        """The bucket at ``now`` (a clock going backwards adds nothing)."""
        return Bucket(min(float(burst), self.tokens + max(0.0, now - self.at) * rate), max(now, self.at))

    def available(self) -> int:
        """Whole tokens that can be taken now (the bucket must be refilled first)."""
        return int(self.tokens + 1e-9)

    def take(self, n: int) -> Bucket:
        return Bucket(self.tokens - n, self.at)

    def wait(self, rate: float) -> float:
        """Seconds until one whole token is available (0 if one is)."""
        missing = 1.0 - self.tokens
        return 0.0 if missing <= 1e-9 or rate <= 0 else missing / rate
