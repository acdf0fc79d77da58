"""Backpressure (per queue) and load shedding (the whole service), decided from numbers the engine reads.

- **Backpressure**: a queue's depth (runnable jobs of every tenant) at or past its ``soft_limit`` flags an
  enqueue (``soft``: accepted, with ``X-Queue-Pressure: soft``); one that would take it past
  ``hard_limit`` is refused (``hard``: :class:`jobengine.errors.QueueFull`, HTTP 429 + Retry-After).
- **Load shedding**: the service is *saturated* while total depth, jobs in flight or the p95 wait before
  start reach their thresholds (each 0 = not watched). While saturated, new jobs with a priority below
  ``min_priority`` are refused (:class:`jobengine.errors.Overloaded`, HTTP 503 + Retry-After); jobs at
  or above it are still taken, which is the headroom kept for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Pressure(StrEnum):
    NONE = "none"
    SOFT = "soft"
    HARD = "hard"


def pressure(depth: int, adding: int, soft: int | None, hard: int | None) -> Pressure:
    """The pressure of adding ``adding`` jobs to a queue holding ``depth`` runnable ones."""
    if hard is not None and depth + adding > hard:
        return Pressure.HARD
    if soft is not None and depth + adding > soft:
        return Pressure.SOFT
    return Pressure.NONE


class Load(StrEnum):
    NORMAL = "normal"
    SATURATED = "saturated"


@dataclass(frozen=True, slots=True)
class ShedPolicy:
    depth: int = 0
    in_flight: int = 0
    latency: float = 0.0
    min_priority: int = 0
    retry_after: float = 5.0

    @property
    def enabled(self) -> bool:
        return bool(self.depth or self.in_flight or self.latency)


@dataclass(frozen=True, slots=True)
class LoadState:
    state: Load
    reasons: tuple[str, ...] = ()


def load_state(policy: ShedPolicy, *, depth: int, in_flight: int, latency: float) -> LoadState:
    reasons = []
    if policy.depth and depth >= policy.depth:
        reasons.append("depth")
    if policy.in_flight and in_flight >= policy.in_flight:
        reasons.append("in_flight")
    if policy.latency and latency >= policy.latency:
        reasons.append("latency")
    return LoadState(Load.SATURATED if reasons else Load.NORMAL, tuple(reasons))


def admits(policy: ShedPolicy, load: LoadState, priority: int) -> bool:
    """Whether a new job of ``priority`` is accepted in ``load``."""
    return load.state is Load.NORMAL or priority >= policy.min_priority
