"""A queue's flow limits: validated in the constructor (InvalidJob names the field), stored as JSON.

- ``rate`` / ``burst`` / ``rate_per``: a token bucket of ``rate`` job starts a second holding at most
  ``burst`` (default: ``max(1, rate)`` rounded up), one per queue (``queue``), per (tenant, queue)
  (``tenant``) or per (tenant, task) (``task``). Claims beyond it wait; the jobs stay queued.
- ``concurrency`` / ``concurrency_key``: at most ``concurrency`` running jobs of the queue per key: the
  job's ``task``, its ``tenant``, or a field of its payload (``payload.<field>``; a job whose payload has
  no such field is not limited by it). The queue-wide limit is the queue's own ``concurrency`` setting.
- ``soft_limit`` / ``hard_limit``: queue depth (runnable jobs, every tenant) past which an enqueue is
  flagged (``soft``) or refused (``hard``: HTTP 429, :class:`jobengine.errors.QueueFull`).
- ``adaptive``: the rate is steered by :class:`jobengine.core.flow.aimd.Aimd` between ``rate_floor`` and
  ``rate_ceiling`` (``rate`` is where it starts), aiming at ``target_error_rate`` and ``target_latency``
  (seconds a job runs, p95 over each adjustment interval; 0: no latency target).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Final

from jobengine.errors import InvalidJob

RATE_PER: Final = ("queue", "tenant", "task")
_KEY_RE: Final = re.compile(r"^(task|tenant|payload\.[A-Za-z0-9_]{1,64})$")


@dataclass(frozen=True, slots=True)
class FlowLimits:
    queue: str
    rate: float | None = None
    burst: int | None = None
    rate_per: str = "queue"
    concurrency: int | None = None
    concurrency_key: str | None = None
    soft_limit: int | None = None
    hard_limit: int | None = None
    adaptive: bool = False
    rate_floor: float | None = None
    rate_ceiling: float | None = None
    target_error_rate: float = 0.05
    target_latency: float = 0.0
    updated_at: float = 0.0

    def __post_init__(self) -> None:
        if self.rate is not None and not (0 < self.rate <= 1_000_000):
            raise InvalidJob("rate", "must be a number of jobs per second above 0 and at most 1000000")
        if self.burst is not None:
            if self.rate is None:
                raise InvalidJob("burst", "needs a rate")
            if not (1 <= self.burst <= 1_000_000):
                raise InvalidJob("burst", "must be an integer from 1 to 1000000")
        if self.rate_per not in RATE_PER:
            raise InvalidJob("rate_per", f"must be one of {', '.join(RATE_PER)}")
        if self.concurrency is not None:
            if not (1 <= self.concurrency <= 1_000_000):
                raise InvalidJob("concurrency", "must be an integer from 1 to 1000000")
            if self.concurrency_key is None:
                raise InvalidJob("concurrency_key", "is required with concurrency (task, tenant or payload.<field>)")
        if self.concurrency_key is not None and not _KEY_RE.match(self.concurrency_key):
            raise InvalidJob("concurrency_key", "must be task, tenant or payload.<field> (letters, digits, _)")
        for name in ("soft_limit", "hard_limit"):
            value = getattr(self, name)
            if value is not None and not (1 <= value <= 1_000_000_000):
                raise InvalidJob(name, "must be an integer from 1 to 1000000000")
        if self.soft_limit is not None and self.hard_limit is not None and self.soft_limit > self.hard_limit:
            raise InvalidJob("soft_limit", "must not be above hard_limit")
        if self.adaptive:
            if self.rate is None:
                raise InvalidJob("adaptive", "needs a rate to start from")
            floor = self.rate_floor if self.rate_floor is not None else 0.0
            ceiling = self.rate_ceiling if self.rate_ceiling is not None else self.rate
            if not (0 < floor <= self.rate <= ceiling):
                raise InvalidJob("rate_floor", "must be above 0 with rate_floor <= rate <= rate_ceiling")
        if not (0 <= self.target_error_rate <= 1):
            raise InvalidJob("target_error_rate", "must be a fraction from 0 to 1")
        if not (0 <= self.target_latency <= 86_400):
            raise InvalidJob("target_latency", "must be from 0 to 86400 seconds")

    @property
    def bucket_size(self) -> float:
        if self.burst is not None:
            return float(self.burst)
        return float(max(1, math.ceil(self.rate or 1)))

    @property
    def claims_limited(self) -> bool:
        """Whether claims of the queue go through the limited claim (a rate or a key concurrency)."""
        return self.rate is not None or self.concurrency is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("queue")
        data.pop("updated_at")
        return data

    @classmethod
    def from_json(cls, queue: str, data: dict[str, Any], updated_at: float = 0.0) -> FlowLimits:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k not in ("queue", "updated_at")}
        return cls(queue=queue, updated_at=updated_at, **known)


def bucket_key(limits: FlowLimits, tenant: str, task: str) -> str:
    """The store's key of the bucket a job of ``tenant`` / ``task`` in ``limits.queue`` takes from."""
    if limits.rate_per == "tenant":
        return f"tq\x1f{tenant}\x1f{limits.queue}"
    if limits.rate_per == "task":
        return f"tt\x1f{tenant}\x1f{task}"
    return f"q\x1f{limits.queue}"
