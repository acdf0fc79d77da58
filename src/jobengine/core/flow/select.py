"""Which runnable jobs a limited claim may start: the decision every backend makes inside its claim
transaction (SQLite under the write lock, PostgreSQL under a per-queue advisory lock), so two workers
cannot both take the last slot or the last token.

Candidates come in claim order (priority DESC, run_at, id). A candidate is taken while the queue has a
free slot (``queue_cap``), its key has a free slot (``limits.concurrency`` per ``concurrency_key``) and its
bucket has a whole token; otherwise it is skipped and stays queued (a later, differently keyed job may
still go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobengine.core.flow.bucket import Bucket
from jobengine.core.flow.limits import FlowLimits, bucket_key

#: How many candidates a limited claim reads per job asked for (at least CANDIDATES_MIN): jobs skipped
#: for a full key are read too, so this bounds how far past them a claim looks.
CANDIDATES_PER_JOB = 4
CANDIDATES_MIN = 100


@dataclass(frozen=True, slots=True)
class ClaimRule:
    """What limits a claim of ``queue``: ``queue_cap`` (the queue's own concurrency setting) and
    ``limits``; ``rate`` is the bucket's rate now (the adaptive limiter's, else ``limits.rate``)."""

    queue: str
    queue_cap: int | None = None
    limits: FlowLimits | None = None
    rate: float | None = None
    #: Only jobs of these tasks / this tenant (remote workers' claims); None: any.
    tasks: tuple[str, ...] | None = None
    tenant: str | None = None
    #: Only these jobs (a broker's deliveries, claimed by id under the queue's limits); None: any.
    ids: tuple[str, ...] | None = None

    @property
    def key(self) -> str | None:
        return self.limits.concurrency_key if self.limits is not None else None

    @property
    def payload_field(self) -> str | None:
        key = self.key
        return key.removeprefix("payload.") if key is not None and key.startswith("payload.") else None

    def candidates(self, limit: int) -> int:
        return max(CANDIDATES_MIN, CANDIDATES_PER_JOB * limit)


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    tenant: str
    task: str
    key: str | None = None  # the payload field's value as text (payload keys only)


@dataclass(slots=True)
class Selection:
    ids: list[str] = field(default_factory=list)
    #: Buckets that tokens were taken from (to write back); untouched buckets are not written.
    buckets: dict[str, Bucket] = field(default_factory=dict)


def key_of(rule: ClaimRule, c: Candidate) -> str | None:
    if rule.key == "task":
        return c.task
    if rule.key == "tenant":
        return c.tenant
    return c.key


def select(
    rule: ClaimRule,
    candidates: Sequence[Candidate],
    *,
    queue_running: int,
    key_running: Mapping[str, int],
    buckets: Mapping[str, Bucket],
    now: float,
    limit: int,
) -> Selection:
    """The ids to start (in claim order) and the buckets after taking their tokens."""
    out = Selection()
    free = limit if rule.queue_cap is None else min(limit, rule.queue_cap - queue_running)
    if free <= 0:
        return out
    lim = rule.limits
    running = dict(key_running)
    current: dict[str, Bucket] = {}
    for c in candidates:
        if len(out.ids) >= free:
            break
        if lim is not None and lim.concurrency is not None:
            k = key_of(rule, c)
            if k is not None and running.get(k, 0) >= lim.concurrency:
                continue
        else:
            k = None
        if lim is not None and rule.rate is not None:
            bk = bucket_key(lim, c.tenant, c.task)
            b = current.get(bk)
            if b is None:
                stored = buckets.get(bk)
                b = stored.refilled(rule.rate, lim.bucket_size, now) if stored else Bucket.full(lim.bucket_size, now)
            if b.available() < 1:
                current[bk] = b
                continue
            current[bk] = b.take(1)
            out.buckets[bk] = current[bk]
        if k is not None:
            running[k] = running.get(k, 0) + 1
        out.ids.append(c.id)
    return out
