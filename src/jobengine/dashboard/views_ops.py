"""Schedules (pause / resume, trigger now, simulate), runs (history with delta summaries, a run's page with
its segments), failure signatures (resolve / suppress / non-retryable) and the dead-letter (replay, purge
with confirmation)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobengine.core.ids import JobId, RunId, ScheduleId
from jobengine.core.models import Job, JobFilter
from jobengine.core.run_modes import RunMode
from jobengine.core.runs import RunFilter
from jobengine.core.schedules import ScheduleFilter, runs_of
from jobengine.core.selection import MAX_BULK
from jobengine.core.signatures import SignatureFilter
from jobengine.core.states import JobState
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other
from jobengine.dashboard.overview import visible_workers
from jobengine.dashboard.session import DashboardError, Session
from jobengine.dashboard.views_runs import diff_values
from jobengine.errors import NotFound

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

PAGE = 50
SIMULATED = 10
SPARK_BUCKETS = 12
#: Running jobs read for the workers page's "jobs in hand" (the tenant's; each worker shows a few).
HELD_READ = 500
#: A run's segments shown on its page.
SEGMENTS_SHOWN = 500
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
_REF_CHARS = _ID_CHARS | frozenset("@/")


def _ref(value: str, field: str) -> str:
    if not 1 <= len(value) <= 200 or not set(value) <= _REF_CHARS:
        raise DashboardError(404, f"no {field} {value!r}", field)
    return value


def _actor(session: Session) -> str:
    return f"dashboard:{session.principal.key_id}"


def _cursor(request: Request) -> str | None:
    value = request.query_params.get("cursor", "").strip()
    if not value:
        return None
    if len(value) > 100 or not set(value) <= _ID_CHARS:
        raise DashboardError(422, "not a cursor of this page", "cursor")
    return value


# -- queues -----------------------------------------------------------------------------------------
async def queues_values(request: Request, session: Session) -> dict[str, Any]:
    """What the queues page's live stream re-renders (the page itself is served by views_jobs)."""
    queues = await engine(request).queues.list(session.tenant)
    return {"queues": queues, "states": [s.value for s in JobState]}


# -- workers ----------------------------------------------------------------------------------------
async def workers_values(request: Request, session: Session) -> dict[str, Any]:
    """What the workers page shows (and its live stream re-renders): the live workers and, per worker, the
    tenant's running jobs it holds (the count of every tenant's needs the scope ``metrics``)."""
    eng = engine(request)
    workers = await visible_workers(eng, session.tenant)
    running = await eng.list_jobs(JobFilter(tenant=session.tenant, states=(JobState.RUNNING,), limit=HELD_READ))
    held: dict[str, list[Job]] = {}
    for job in running:
        if job.lease_worker:
            held.setdefault(job.lease_worker, []).append(job)
    return {"workers": workers, "held": held, "counts": session.allows("metrics"), "now": time.time()}


@router.get("/workers")
async def workers_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    return render(request, "workers.html", session, await workers_values(request, session))


# -- schedules --------------------------------------------------------------------------------------
async def schedules_values(request: Request, session: Session) -> dict[str, Any]:
    schedules = await engine(request).schedules.list(ScheduleFilter(tenant=session.tenant, limit=500))
    return {"schedules": schedules, "now": time.time()}


async def schedule_names(request: Request, session: Session) -> dict[ScheduleId, str]:
    """The tenant's schedules by id, to name a run's schedule instead of showing its id."""
    schedules = await engine(request).schedules.list(ScheduleFilter(tenant=session.tenant, limit=1000))
    return {s.id: s.name for s in schedules}


@router.get("/schedules")
async def schedules_page(request: Request) -> Response:
    session = await sess.require(request, "schedules:read")
    return render(request, "schedules.html", session, await schedules_values(request, session))


@router.get("/schedules/{ref}")
async def schedule_page(request: Request, ref: str) -> Response:
    session = await sess.require(request, "schedules:read")
    eng = engine(request)
    schedule = await eng.schedules.get(_ref(ref, "schedule"), session.tenant)
    cron = request.query_params.get("cron", "").strip()
    timezone = request.query_params.get("timezone", "").strip() or schedule.spec.timezone
    if cron:
        # A proposed cadence: simulated (writes nothing); a bad expression or zone is a 422 naming the field.
        if len(cron) > 200 or len(timezone) > 100:
            raise DashboardError(422, "too long", "cron" if len(cron) > 200 else "timezone")
        proposed = replace(schedule.spec, cron=cron, every=None, timezone=timezone)
        simulation = await eng.schedules.simulate(proposed, count=SIMULATED, tenant=session.tenant)
    else:
        simulation = await eng.schedules.simulate(schedule.id, count=SIMULATED, tenant=session.tenant)
    runs = await eng.runs.list(RunFilter(tenant=session.tenant, schedule_id=runs_of(schedule), limit=20))
    values = {
        "schedule": schedule, "simulation": simulation, "runs": runs, "now": time.time(), "proposed": cron,
        "timezone": timezone,
    }  # fmt: skip
    return render(request, "schedule.html", session, values)


@router.post("/schedules/{ref}/{verb}")
async def schedule_action(request: Request, ref: str, verb: str) -> Response:
    session, form = await sess.action(request, "schedules:write")
    eng = engine(request)
    ref = _ref(ref, "schedule")
    actor = _actor(session)
    if verb == "pause":
        schedule = await eng.schedules.pause(ref, tenant=session.tenant, actor=actor)
        done = f"schedule {schedule.name} paused"
    elif verb == "resume":
        schedule = await eng.schedules.resume(ref, tenant=session.tenant, actor=actor)
        done = f"schedule {schedule.name} resumed"
    elif verb == "trigger":
        reason = form.get("reason", "").strip()
        if not 1 <= len(reason) <= 1000:
            raise DashboardError(422, "say why you trigger it now, in 1-1000 characters", "reason")
        run = await eng.schedules.trigger(ref, reason=reason, tenant=session.tenant, actor=actor)
        return see_other(f"/runs/{run.id}", "run triggered")
    else:
        raise DashboardError(404, f"no action {verb!r} (pause, resume, trigger)", "action")
    back = form.get("back", "")
    return see_other(back if back.startswith("/schedules") and "//" not in back else "/schedules", done)


# -- runs -------------------------------------------------------------------------------------------
async def runs_values(request: Request, session: Session) -> dict[str, Any]:
    """The runs page (``?schedule=`` one schedule's, ``?mode=`` a run request mode's, ``?cursor=`` older
    ones) and its live stream."""
    cursor = _cursor(request)
    schedule = request.query_params.get("schedule", "").strip() or None
    if schedule and " " in schedule:  # a run request's stream ("<task> <source>"): two names
        for name in schedule.split(" ", 1):
            _ref(name, "schedule")
    elif schedule:
        _ref(schedule, "schedule")
    mode = request.query_params.get("mode", "").strip()
    modes = [m.value for m in RunMode]
    if mode and mode not in modes:
        raise DashboardError(422, f"one of {', '.join(modes)}", "mode")
    filt = RunFilter(
        tenant=session.tenant, schedule_id=ScheduleId(schedule) if schedule else None, limit=PAGE,
        before_id=RunId(cursor) if cursor else None, mode=mode or None,
    )  # fmt: skip
    runs = await engine(request).runs.list(filt)
    names = await schedule_names(request, session)
    return {
        "runs": runs, "schedule": schedule or "", "names": names, "query": request.url.query,
        "next_cursor": runs[-1].id if len(runs) >= PAGE else None, "mode": mode, "modes": modes,
    }  # fmt: skip


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    session = await sess.require(request, "schedules:read")
    return render(request, "runs.html", session, await runs_values(request, session))


async def run_values(request: Request, session: Session, run_id: str) -> dict[str, Any]:
    """A run's page and its live stream: the run, its schedule's name, its segments with their jobs."""
    eng = engine(request)
    run = await eng.runs.get(_ref(run_id, "run"), session.tenant)
    segments = await eng.runs.segments(run.id, session.tenant)
    jobs = {j.id: j for j in await eng.get_jobs([s.job_id for s in segments[:SEGMENTS_SHOWN]], session.tenant)}
    try:
        schedule_name: str | None = (await eng.schedules.get(run.schedule_id, session.tenant)).name
    except NotFound:
        schedule_name = None  # the schedule was deleted; its runs stay
    failed = run.summary.dead + run.summary.cancelled
    return {
        "run": run, "segments": segments[:SEGMENTS_SHOWN], "jobs": jobs, "total": len(segments),
        "more": max(0, len(segments) - SEGMENTS_SHOWN), "schedule_name": schedule_name,
        "can_retry": run.ended and failed > 0, "failed": failed, "session": session, "csrf": session.csrf,
    }  # fmt: skip


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str) -> Response:
    """A run's page; a unique prefix of its id (a short id) redirects to its page."""
    session = await sess.require(request, "schedules:read")
    values = await run_values(request, session, run_id)
    if values["run"].id != run_id:
        return RedirectResponse(f"/runs/{values['run'].id}", status_code=302)
    # The diff of a simulate run is read once, with the page: an ended run no longer changes.
    values.update(await diff_values(request, session, values["run"]))
    return render(request, "run.html", session, values)


@router.post("/runs/{run_id}/{verb}")
async def run_action(request: Request, run_id: str, verb: str) -> Response:
    session, _ = await sess.action(request, "schedules:write")
    eng = engine(request)
    run_id = _ref(run_id, "run")
    if verb == "cancel":
        run = await eng.runs.cancel(run_id, reason="cancelled from the dashboard", tenant=session.tenant,
                                   actor=_actor(session))  # fmt: skip
        return see_other(f"/runs/{run.id}", "run cancelled")
    if verb == "retry":
        run = await eng.runs.retry(run_id, tenant=session.tenant, actor=_actor(session))
        return see_other(f"/runs/{run.id}", "retry run created")
    raise DashboardError(404, f"no action {verb!r} (cancel, retry)", "action")


# -- failure signatures -----------------------------------------------------------------------------
def _spark(samples: list[Job], error_type: str, first: float, now: float) -> list[int]:
    """Occurrences of ``error_type`` among the sample jobs' attempts, in SPARK_BUCKETS slices of
    [first seen, now]: the recent shape of a signature (samples are its latest jobs, not every one)."""
    span = max(now - first, 1.0)
    counts = [0] * SPARK_BUCKETS
    for job in samples:
        for err in job.errors:
            if err.type == error_type and err.at >= first:
                counts[min(SPARK_BUCKETS - 1, int((err.at - first) / span * SPARK_BUCKETS))] += 1
    return counts


async def failures_values(request: Request, session: Session) -> dict[str, Any]:
    eng = engine(request)
    signatures = await eng.signatures.list(SignatureFilter(tenant=session.tenant, limit=PAGE))
    ids = list(dict.fromkeys(i for s in signatures for i in s.sample_job_ids))
    jobs = {j.id: j for j in await eng.get_jobs(ids, session.tenant)}
    now = time.time()
    rows: list[dict[str, Any]] = []
    for s in signatures:
        samples = [jobs[i] for i in s.sample_job_ids if i in jobs]
        rows.append({"sig": s, "samples": samples, "spark": _spark(samples, s.error_type, s.first_seen, now)})
    return {"rows": rows, "now": now}


@router.get("/failures")
async def failures_page(request: Request) -> Response:
    session = await sess.require(request, "schedules:read")
    return render(request, "failures.html", session, await failures_values(request, session))


@router.post("/failures/{key}/{verb}")
async def failure_action(request: Request, key: str, verb: str) -> Response:
    session, _ = await sess.action(request, "schedules:write")
    key = _ref(key, "signature")
    eng = engine(request)
    actor = _actor(session)
    table: dict[str, dict[str, Any]] = {
        "resolve": {"status": "resolved"},
        "suppress": {"status": "suppressed"},
        "reopen": {"status": "active"},
        "non-retryable": {"non_retryable": True},
        "retryable": {"non_retryable": False},
    }
    changes = table.get(verb)
    if changes is None:
        raise DashboardError(404, f"no action {verb!r} (resolve, suppress, reopen, non-retryable, retryable)", "action")
    await eng.signatures.update(key, tenant=session.tenant, actor=actor, **changes)
    return see_other("/failures", f"signature {key}: {verb} done")


# -- dead-letter ------------------------------------------------------------------------------------
@router.get("/dead")
async def dead_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    cursor = _cursor(request)
    filt = JobFilter(tenant=session.tenant, states=(JobState.DEAD,), limit=PAGE,
                     before_id=JobId(cursor) if cursor else None)  # fmt: skip
    jobs = await engine(request).list_jobs(filt)
    values = {"jobs": jobs, "next_cursor": jobs[-1].id if len(jobs) >= PAGE else None, "cursor": cursor,
              "bulk_max": MAX_BULK}  # fmt: skip
    return render(request, "dead.html", session, values)


@router.post("/dead/replay")
async def dead_replay(request: Request) -> Response:
    session, form = await sess.action(request, "jobs:write")
    ids = [i for i in form.get("ids", "").split(",") if i]
    if any(len(i) > 100 or not set(i) <= _ID_CHARS for i in ids):
        raise DashboardError(422, "not a list of job ids", "ids")
    replayed = await engine(request).queues.replay_dead(session.tenant, ids=ids or None, limit=1000)
    return see_other("/dead", f"{len(replayed)} job(s) replayed")


@router.get("/dead/purge")
async def purge_confirm(request: Request) -> Response:
    session = await sess.require(request, "jobs:write")
    count = await engine(request).queues.counts.counts(session.tenant)  # not a full count of a large store
    dead = sum(n for (_, s), n in count.items() if s is JobState.DEAD)
    return render(request, "purge.html", session, {"dead": dead})


@router.post("/dead/purge")
async def purge(request: Request) -> Response:
    session, form = await sess.action(request, "jobs:write")
    if form.get("confirm") != "purge":
        raise DashboardError(422, "type purge to confirm", "confirm")
    purged = await engine(request).queues.purge_dead(session.tenant, limit=10_000)
    return see_other("/dead", f"{purged} dead job(s) purged")
