"""The scheduler's decisions, as pure functions: which ticks fire now (the misfire policy), when each
run's jobs start (jitter), and how a run's items split into segments (jobs).

A tick is *on time* when the scheduler sees it at most ``grace`` seconds after it passed: it fires. Older
ticks were *missed* (no scheduler was running) and the misfire policy decides: ``skip`` fires none,
``run_once`` fires the newest, ``catch_up`` the newest N (oldest first). The grace must be longer than a
leader fail-over (lease expiry plus a poll), so that a replica taking over fires what the dead leader
left on time, and no tick is lost while one replica is alive.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from jobengine.core.cron import Cadence
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.models import Json, NewEvent, NewJob
from jobengine.core.runs import Run, RunState, RunSummary
from jobengine.core.schedules import (
    MAX_SEGMENTS,
    SCHEDULE_MISFIRED,
    SCHEDULE_SKIPPED,
    JobTemplate,
    MisfirePolicy,
    OverlapPolicy,
)
from jobengine.errors import InvalidSchedule

#: How many due ticks one pass looks at, newest first (beyond it, missed ticks are only counted as "more").
SCAN_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True)
class TickPlan:
    fire: tuple[float, ...]  # ticks that fire now, oldest first
    dropped: int  # missed ticks the misfire policy dropped (counted up to the scan limit)
    dropped_more: bool  # more were dropped than counted
    cursor: float  # the new cursor: every tick up to it is handled
    next_fire_at: float | None


def plan_ticks(
    cadence: Cadence, cursor: float, now: float, grace: float, policy: MisfirePolicy, catch_up: int
) -> TickPlan:
    """What a scheduler pass at ``now`` does with the ticks in ``(cursor, now]``."""
    limit = SCAN_LIMIT + catch_up
    due = cadence.latest(now, cursor, limit)  # newest first
    if not due:
        return TickPlan((), 0, False, cursor, cadence.next_after(max(cursor, now)))
    on_time = [t for t in due if now - t <= grace]
    missed = due[len(on_time) :]
    if policy is MisfirePolicy.SKIP:
        rescued: list[float] = []
    elif policy is MisfirePolicy.RUN_ONCE:
        rescued = missed[:1]
    else:
        rescued = missed[:catch_up]
    fire = tuple(sorted(on_time + rescued))
    truncated = len(due) >= limit
    return TickPlan(fire, len(missed) - len(rescued), truncated, due[0], cadence.next_after(now))


def jitter_offset(schedule_id: str, tick: float, jitter: float) -> float:
    """Seconds after ``tick`` that its run's jobs start: uniform in [0, jitter), the same on every replica
    (a hash of schedule and tick, not a random draw), so a simulation shows what will happen."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{schedule_id}|{tick_key(tick)}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return round(fraction * jitter, 3)


def tick_key(tick: float) -> int:
    """The unique key of a tick: whole milliseconds (ticks are always whole milliseconds)."""
    return round(tick * 1000)


def tick_run_id(schedule_id: str, tick: float) -> RunId:
    """The id of the run a schedule's tick fires, the same wherever it is computed: a UUIDv7 whose time is
    the tick's and whose other bits are a digest of schedule and tick, so it sorts and shortens like any
    run id (``core.ids.short_id``) and two writers of one tick write the same run."""
    ms = tick_key(tick) & ((1 << 48) - 1)
    digest = int.from_bytes(hashlib.sha256(f"{schedule_id} {ms}".encode()).digest()[:10])
    rand_a, rand_b = digest >> 68, digest & ((1 << 62) - 1)
    return RunId(str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)))


def split_items(items: Sequence[Json], segment_size: int) -> list[list[Json]]:
    """Consecutive shares of ``segment_size`` items (the last may be shorter). Raises InvalidSchedule when
    that would make more than MAX_SEGMENTS jobs."""
    count = math.ceil(len(items) / segment_size)
    if count > MAX_SEGMENTS:
        raise InvalidSchedule(
            "template.segment_size", f"{len(items)} items make {count} segments; at most {MAX_SEGMENTS}"
        )
    return [list(items[i : i + segment_size]) for i in range(0, len(items), segment_size)]


@dataclass(frozen=True, slots=True)
class JobDefaults:
    """What a template leaves out: the registered task's queue, priority and attempts."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3


def plan_jobs(
    template: JobTemplate,
    items: Sequence[Json] | None,
    *,
    tenant: str,
    run_id: RunId,
    schedule_id: ScheduleId,
    run_at: float | None,
    defaults: JobDefaults,
) -> tuple[list[NewJob], list[int]]:
    """The jobs of one run and how many items each carries. ``items`` None: one job with the template's
    payload. An empty list: no jobs (the run has no work)."""

    def job(payload: Json) -> NewJob:
        return NewJob(
            task=template.task,
            payload=payload,
            queue=template.queue or defaults.queue,
            priority=template.priority if template.priority is not None else defaults.priority,
            max_attempts=template.max_attempts if template.max_attempts is not None else defaults.max_attempts,
            tenant=tenant,
            run_at=run_at,
            run_id=run_id,
            schedule_id=schedule_id,
        )

    if items is None:
        return [job(template.payload)], [0]
    shares = split_items(items, template.segment_size)
    base: Mapping[str, Json] = template.payload if isinstance(template.payload, Mapping) else {}
    jobs = [job({**base, "items": share, "segment": i, "segments": len(shares)}) for i, share in enumerate(shares)]
    return jobs, [len(share) for share in shares]


class TickAction(StrEnum):
    FIRE = "fire"  # write the run and its jobs
    SKIP = "skip"  # record the tick as skipped, no run
    DEFER = "defer"  # write the run as planning, without jobs: it is planned when its turn comes


def overlap_action(policy: OverlapPolicy, previous_active: bool) -> TickAction:
    """What a tick does given whether a run of its schedule is still planning, queued or running."""
    if not previous_active or policy is OverlapPolicy.ALLOW:
        return TickAction.FIRE
    return TickAction.SKIP if policy is OverlapPolicy.SKIP else TickAction.DEFER


def deferred(run: Run) -> Run:
    """The run a DEFER tick writes: waiting, without jobs (it is planned afresh when its turn comes)."""
    return replace(run, state=RunState.PLANNING, no_work=False, items=0, summary=RunSummary(), reason=None)


def skipped_event(
    tenant: str, schedule_id: str, tick: float, policy: OverlapPolicy = OverlapPolicy.SKIP, reason: str | None = None
) -> NewEvent:
    """A tick recorded as skipped: by the overlap ``policy``, or (``reason``) because its run could not start."""
    data: dict[str, Json] = {"schedule_id": schedule_id, "tick": tick, "policy": policy.value}
    if reason is not None:
        data["reason"] = reason
    return NewEvent(type=SCHEDULE_SKIPPED, tenant=tenant, job_id=None, queue=None, task=None, data=data)


def misfired_event(tenant: str, schedule_id: str, plan: TickPlan, policy: MisfirePolicy) -> NewEvent:
    data: dict[str, Json] = {
        "schedule_id": schedule_id,
        "skipped": plan.dropped,
        "more": plan.dropped_more,
        "policy": policy.value,
    }
    return NewEvent(type=SCHEDULE_MISFIRED, tenant=tenant, job_id=None, queue=None, task=None, data=data)
