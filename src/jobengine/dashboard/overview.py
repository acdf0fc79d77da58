"""The overview's figures, read through the engine facade for one tenant (the page and its SSE stream).

*Workers alive* are the registered live workers that may run the tenant's jobs (:func:`visible_workers`).
*Scheduler leader* is the scheduler instance that fired the tenant's latest scheduled run (the
leader's identity is not stored anywhere else). Both are written on the page as such.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from jobengine.core.models import JobFilter
from jobengine.core.runs import RunFilter, RunTrigger
from jobengine.core.states import JobState
from jobengine.dashboard.stats import Recorder
from jobengine.engine import Engine
from jobengine.errors import JobEngineError
from jobengine.ports.workers import WorkerInfo

#: Running jobs shown.
RUNNING_SHOWN = 15
WAITING = (JobState.QUEUED, JobState.SCHEDULED, JobState.FAILED, JobState.BLOCKED)


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    waiting: int
    running: int
    dead: int
    paused: bool
    concurrency: int | None


async def visible_workers(engine: Engine, tenant: str) -> list[WorkerInfo]:
    """The live workers that may run ``tenant``'s jobs: every worker on the store, and the tenant's own
    remote workers (another tenant's are none of its business)."""
    return [w for w in await engine.fleet.live() if w.tenant is None or w.tenant == tenant]


async def _leader(engine: Engine, tenant: str) -> dict[str, Any] | None:
    try:
        runs = await engine.runs.list(RunFilter(tenant=tenant, trigger=RunTrigger.SCHEDULE, limit=1))
    except JobEngineError:
        return None  # a store without the scheduler's tables
    return {"fired_by": runs[0].fired_by, "at": runs[0].created_at} if runs else None


async def overview(engine: Engine, tenant: str, recorder: Recorder, share: float = 0.0) -> dict[str, Any]:
    """The overview's values. ``share``: seconds a count may be given again (the live stream's refresh: on
    SQLite a full count is one pass over the tenant's jobs, docs/decisions/0030-dashboard-counts-without-index.md,
    and ten open tabs would otherwise spend most of a core counting); 0, the page's, asks for a count of its own."""
    now = time.time()
    # Independent reads at once (PostgreSQL runs them on separate connections; SQLite queues them).
    counts, settings, running, leader, health, workers = await asyncio.gather(
        engine.queues.counts.counts(tenant, share=share),
        engine.queues.settings(),
        engine.list_jobs(JobFilter(tenant=tenant, states=(JobState.RUNNING,), limit=RUNNING_SHOWN)),
        _leader(engine, tenant),
        engine.health.readiness(timeout=1.0),
        visible_workers(engine, tenant),
    )
    totals = {s.value: 0 for s in JobState}
    for (_, s), n in counts.items():
        totals[s.value] += n
    names = sorted({q for q, _ in counts} | set(settings))
    queues = [
        QueueRow(
            name,
            sum(counts.get((name, s), 0) for s in WAITING),
            counts.get((name, JobState.RUNNING), 0),
            counts.get((name, JobState.DEAD), 0),
            settings[name].paused if name in settings else False,
            settings[name].concurrency if name in settings else None,
        )
        for name in names
    ]
    await recorder.pull()
    return {
        "now": now,
        "totals": totals,
        "queues": queues,
        "running": running,
        "running_total": totals[JobState.RUNNING.value],
        "workers": workers,
        "leader": leader,
        "health": health,
        "series": recorder.series(tenant),
    }
