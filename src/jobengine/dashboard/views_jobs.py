"""Login, overview, jobs (list with filters and cursor paging, a job's page and its actions) and queues."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobengine.core.bounds import check_time, text_error
from jobengine.core.ids import JobId
from jobengine.core.keys import allows
from jobengine.core.models import Event, JobFilter, check_filter, check_name
from jobengine.core.selection import MAX_BULK, BulkAction
from jobengine.core.states import JobState
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other, state
from jobengine.dashboard.overview import overview
from jobengine.dashboard.session import DashboardError
from jobengine.errors import InvalidJob
from jobengine.http.context import context

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

PAGE = 50
#: The search form's fields beside ``state`` (the API's job list takes the same).
SEARCH_FIELDS = ("queue", "task", "id", "created_after", "created_before", "payload")
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
def _cursor_param(request: Request) -> JobId | None:
    value = request.query_params.get("cursor", "").strip()
    if not value:
        return None
    if len(value) > 100 or not set(value) <= _ID_CHARS:
        raise DashboardError(422, "not a cursor of this page", "cursor")
    return JobId(value)


def _states_of(raws: list[str]) -> tuple[JobState, ...]:
    out = []
    for raw in raws:
        if not raw:
            continue
        try:
            out.append(JobState(raw))
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise DashboardError(422, f"{raw!r} is not a job state (one of {known})", "state") from None
    return tuple(dict.fromkeys(out))


def _moment(field: str, raw: str) -> float | None:
    """A time of the search form: ISO 8601, UTC when it names no zone (what a datetime-local input sends)."""
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise DashboardError(422, f"{raw!r} is not a time (like 2030-01-31T09:00)", field) from None
    return check_time(field, at if at.tzinfo is not None else at.replace(tzinfo=UTC))


def search_of(
    values: Callable[[str], list[str]], tenant: str, limit: int = PAGE
) -> tuple[JobFilter, list[tuple[str, str]]]:
    """The job filter of a query string or a form (``values(name)``: the field's values), and its fields
    as pairs to carry on (in links, the live stream and the bulk form). The same filter as the API's."""

    def one(name: str) -> str:
        return (values(name) or [""])[0].strip()

    states = _states_of(values("state"))
    queue, task = (_name_value(name, one(name)) for name in ("queue", "task"))
    id_prefix, payload = one("id") or None, one("payload") or None
    filt = JobFilter(
        tenant=tenant, states=states, queue=queue, task=task, limit=limit, id_prefix=id_prefix,
        created_after=_moment("created_after", one("created_after")),
        created_before=_moment("created_before", one("created_before")), payload_text=payload,
    )  # fmt: skip
    try:
        check_filter(filt)
    except InvalidJob as exc:
        raise DashboardError(422, exc.message, exc.field) from None
    pairs = [("state", s.value) for s in states]
    pairs += [(name, one(name)) for name in SEARCH_FIELDS if one(name)]
    return filt, pairs


def _name_value(field: str, value: str) -> str | None:
    if not value:
        return None
    try:
        return check_name(field, value)
    except InvalidJob as exc:
        raise DashboardError(422, exc.message, field) from None


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    session = await sess.require(request, "jobs:read")
    filt, pairs = search_of(request.query_params.getlist, session.tenant)
    cursor = _cursor_param(request)
    jobs = await engine(request).list_jobs(replace(filt, before_id=cursor))
    shown = dict(pairs)
    values: dict[str, Any] = {
        "jobs": jobs, "states": [s.value for s in filt.states], "all_states": [s.value for s in JobState],
        **{name: shown.get(name, "") for name in SEARCH_FIELDS},
        "search_pairs": pairs, "query": urlencode(pairs), "next_cursor": jobs[-1].id if len(jobs) >= PAGE else None,
        "first_page": cursor is None, "bulk_max": MAX_BULK,
    }  # fmt: skip
    return render(request, "jobs.html", session, values)


@router.post("/jobs/actions")
async def jobs_bulk_action(request: Request) -> Response:
    """Cancel, retry, replay or delete the jobs ticked, or every job the filter of the form selects."""
    session, form = await sess.action(request, "jobs:write")
    fields = parse_qs((await request.body()).decode(), keep_blank_values=True)
    action = BulkAction.parse(form.get("action", ""))
    back = form.get("back", "")
    back = back if back.startswith(("/jobs", "/dead")) and "//" not in back else "/jobs"
    eng = engine(request)
    reason = "cancelled from the dashboard"
    if form.get("all_matching") == "1":
        filt, _ = search_of(lambda name: fields.get(name, []), session.tenant, MAX_BULK)
        result = await eng.jobs.apply(action, filter=filt, tenant=session.tenant, reason=reason)
    else:
        ids = [i for i in fields.get("id", []) if i]
        if not ids:
            raise DashboardError(422, "tick some jobs, or all jobs matching the filter", "id")
        if any(len(i) > 100 or not set(i) <= _ID_CHARS for i in ids):
            raise DashboardError(422, "not a list of job ids", "id")
        result = await eng.jobs.apply(action, ids=ids, tenant=session.tenant, reason=reason)
    done = f"{action.value}: {len(result.changed)} of {result.matched} job(s) changed"
    if result.refused_count:
        done += f", {result.refused_count} left as they were ({result.refused[0][1]}, ...)"
    if result.more:
        done += f"; more than {MAX_BULK} matched, run it again for the rest"
    return RedirectResponse(back + ("&" if "?" in back else "?") + urlencode({"done": done}), status_code=303)


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
    """A job's page; a unique prefix of its id (a short id) redirects to its page."""
    session = await sess.require(request, "jobs:read")
    found = await engine(request).jobs.resolve(job_id_param(job_id), session.tenant)
    if found.id != job_id:
        return RedirectResponse(f"/jobs/{found.id}", status_code=302)
    values = await job_values(request, session, job_id)
    return render(request, "job.html", session, values)


@router.post("/jobs/{job_id}/{verb}")
async def job_action(request: Request, job_id: str, verb: str) -> Response:
    session, form = await sess.action(request, "jobs:write")
    eng = engine(request)
    job_id = await eng.jobs.resolve_id(job_id_param(job_id), session.tenant)
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
