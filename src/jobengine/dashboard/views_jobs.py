"""Login, overview, jobs (list with filters and cursor paging, a job's page and its actions) and queues."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobengine.core import codec
from jobengine.core.bounds import text_error
from jobengine.core.ids import JobId
from jobengine.core.keys import allows
from jobengine.core.models import Event, Job, JobFilter, check_name
from jobengine.core.states import JobState
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other, state
from jobengine.dashboard.overview import overview
from jobengine.dashboard.session import DashboardError
from jobengine.errors import InvalidJob
from jobengine.http.context import context

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

PAGE = 50
#: A text search reads at most this many jobs (newest first) per page request, then offers to go on.
SEARCH_SCAN = 2_000
_SCAN_BATCH = 500
#: A job's events shown on its page (the newest).
EVENTS_SHOWN = 100
EVENT_PAGES = 50
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


# -- login ------------------------------------------------------------------------------------------
@router.get("/login")
async def login_page(request: Request) -> Response:
    values = {"next": sess.safe_next(request.query_params.get("next")), "error": None}
    return render(request, "login.html", None, values)


@router.post("/login")
async def login(request: Request) -> Response:
    if not sess.same_origin(request):
        raise DashboardError(403, "the form was posted from another site", "Origin")
    form = await sess.read_form(request)
    target = sess.safe_next(form.get("next"))
    text = form.get("key", "").strip()
    eng = engine(request)
    key = await eng.keys.authenticate(text) if text else None
    if key is None:
        error = "enter an API key" if not text else "this API key is unknown or revoked"
        return render(request, "login.html", None, {"next": target, "error": error}, 401)
    if not allows(key.scopes, "jobs:read"):  # every page needs it: such a key would see only errors
        error = "this API key lacks the scope jobs:read, which the dashboard needs"
        return render(request, "login.html", None, {"next": target, "error": error}, 403)
    previous = request.cookies.get(sess.COOKIE)
    if previous:  # a new login never carries on an older session (nor one someone planted)
        await eng.keys.end_session(previous)
    _, token = await eng.keys.open_session(key)
    response = RedirectResponse(target, status_code=303)
    # Secure: browsers take it over plain HTTP from localhost only; anywhere else serve the dashboard over
    # HTTPS (a proxy in front), so the session token never travels in clear.
    response.set_cookie(sess.COOKIE, token, max_age=int(context(request).settings.dashboard_session_seconds),
                        httponly=True, secure=True, samesite="strict", path="/")  # fmt: skip
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    session, _ = await sess.action(request, None)
    await engine(request).keys.end_session(session.token)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(sess.COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    return response


# -- overview ---------------------------------------------------------------------------------------
@router.get("/")
async def overview_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    data = await overview(engine(request), session.tenant, state(request).recorder)
    return render(request, "overview.html", session, data)


# -- jobs -------------------------------------------------------------------------------------------
def _name_param(request: Request, field: str) -> str | None:
    value = request.query_params.get(field, "").strip()
    if not value:
        return None
    try:
        return check_name(field, value)
    except InvalidJob as exc:
        raise DashboardError(422, exc.message, field) from None


def _cursor_param(request: Request) -> JobId | None:
    value = request.query_params.get("cursor", "").strip()
    if not value:
        return None
    if len(value) > 100 or not set(value) <= _ID_CHARS:
        raise DashboardError(422, "not a cursor of this page", "cursor")
    return JobId(value)


def _states_param(request: Request) -> tuple[JobState, ...]:
    out = []
    for raw in request.query_params.getlist("state"):
        if not raw:
            continue
        try:
            out.append(JobState(raw))
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise DashboardError(422, f"{raw!r} is not a job state (one of {known})", "state") from None
    return tuple(dict.fromkeys(out))


def _matches(job: Job, text: str) -> bool:
    if text in job.id.lower() or text in job.task.lower() or text in job.queue.lower():
        return True
    if job.reason and text in job.reason.lower():
        return True
    if any(text in e.message.lower() or text in e.type.lower() for e in job.errors):
        return True
    return text in codec.dumps(job.payload).lower()


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    states = _states_param(request)
    queue = _name_param(request, "queue")
    task = _name_param(request, "task")
    text = request.query_params.get("q", "").strip()
    if len(text) > 200:
        raise DashboardError(422, "search text is at most 200 characters", "q")
    cursor = _cursor_param(request)
    eng = engine(request)
    base = JobFilter(tenant=session.tenant, states=states, queue=queue, task=task, limit=PAGE, before_id=cursor)
    scanned = 0
    if not text:
        jobs = await eng.list_jobs(base)
        next_cursor = jobs[-1].id if len(jobs) >= PAGE else None
    else:
        # No index can answer a substring search: read newest first in batches, at most SEARCH_SCAN jobs.
        needle = text.lower()
        jobs, before, exhausted = [], cursor, False
        while len(jobs) < PAGE and scanned < SEARCH_SCAN:
            batch = await eng.list_jobs(
                JobFilter(
                    tenant=session.tenant, states=states, queue=queue, task=task, limit=_SCAN_BATCH, before_id=before
                )
            )
            for job in batch:
                scanned += 1
                before = job.id
                if _matches(job, needle):
                    jobs.append(job)
                    if len(jobs) >= PAGE:
                        break
            if len(batch) < _SCAN_BATCH:
                exhausted = len(jobs) < PAGE
                break
        next_cursor = None if exhausted else before
    values: dict[str, Any] = {
        "jobs": jobs, "states": [s.value for s in states], "queue": queue or "", "task": task or "", "q": text,
        "next_cursor": next_cursor, "all_states": [s.value for s in JobState], "scanned": scanned,
        "search_limit": SEARCH_SCAN, "first_page": cursor is None,
    }  # fmt: skip
    return render(request, "jobs.html", session, values)


def job_id_param(job_id: str) -> str:
    if not 1 <= len(job_id) <= 100 or not set(job_id) <= _ID_CHARS:
        raise DashboardError(404, f"no job {job_id!r}", "job_id")
    return job_id


async def newest_events(request: Request, job_id: str, tenant: str) -> deque[Event]:
    """The job's newest EVENTS_SHOWN events, oldest first. The log is read forwards only, so a job with
    many events (progress is one every half second) is paged through, at most EVENT_PAGES pages."""
    eng = engine(request)
    out: deque[Event] = deque(maxlen=EVENTS_SHOWN)
    after = 0
    for _ in range(EVENT_PAGES):
        page = await eng.events(after, 1000, job_id=job_id, tenant=tenant)
        out.extend(page)
        if len(page) < 1000:
            break
        after = page[-1].id
    return out


async def job_values(
    request: Request, session: sess.Session, job_id: str, events: Sequence[Event] | None = None
) -> dict[str, Any]:
    """What a job's page shows; ``events``: its newest events when the caller keeps them (the live stream)."""
    eng = engine(request)
    job = await eng.get_job(job_id, session.tenant)
    if events is None:
        events = await newest_events(request, job.id, session.tenant)
    waiting = (await eng.fleet.waiting_reasons([job])).get(job.id)
    return {"job": job, "events": list(reversed(events)), "session": session, "csrf": session.csrf, "waiting": waiting}


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    session = await sess.require(request, "jobs:read")
    values = await job_values(request, session, job_id_param(job_id))
    return render(request, "job.html", session, values)


@router.post("/jobs/{job_id}/{verb}")
async def job_action(request: Request, job_id: str, verb: str) -> Response:
    session, form = await sess.action(request, "jobs:write")
    job_id = job_id_param(job_id)
    eng = engine(request)
    if verb == "cancel":
        reason = form.get("reason", "").strip() or "cancelled from the dashboard"
        if len(reason) > 1000:
            raise DashboardError(422, "at most 1000 characters", "reason")
        if (error := text_error(reason)) is not None:
            raise DashboardError(422, error, "reason")
        await eng.cancel(job_id, reason, session.tenant)
        done = "cancel requested"
    elif verb == "retry":
        await eng.retry(job_id, session.tenant)
        done = "queued again"
    elif verb == "replay":
        await eng.replay(job_id, session.tenant)
        done = "replayed"
    else:
        raise DashboardError(404, f"no action {verb!r} (cancel, retry, replay)", "action")
    back = form.get("back", "")
    return see_other(back if back in ("/dead",) else f"/jobs/{job_id}", done)


# -- queues -----------------------------------------------------------------------------------------
@router.get("/queues")
async def queues_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    queues = await engine(request).queues.list(session.tenant)
    return render(request, "queues.html", session, {"queues": queues, "states": [s.value for s in JobState]})


@router.post("/queues/{name}/{verb}")
async def queue_action(request: Request, name: str, verb: str) -> Response:
    _, form = await sess.action(request, "queues:write")
    eng = engine(request)
    try:
        check_name("queue", name)
    except InvalidJob as exc:
        raise DashboardError(422, exc.message, "queue") from None
    if verb == "pause":
        await eng.queues.update(name, paused=True)
    elif verb == "resume":
        await eng.queues.update(name, paused=False)
    elif verb == "limit":
        raw = form.get("concurrency", "").strip()
        if not raw:
            await eng.queues.update(name, unlimited=True)
        elif not raw.isdigit():
            raise DashboardError(422, "a whole number from 1 to 1000000, or empty for no limit", "concurrency")
        else:
            await eng.queues.update(name, concurrency=int(raw))
    else:
        raise DashboardError(404, f"no action {verb!r} (pause, resume, limit)", "action")
    return see_other("/queues", f"queue {name}: {verb} done")
